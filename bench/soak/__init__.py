"""``make soak``'s parts (its ``__main__`` runs them): the paced mix in consecutive wrk runs,
sampled each interval, and the verdict on memory, open files and errors."""
