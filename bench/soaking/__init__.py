"""``make soak``'s parts (bench/soak.py runs them): the paced mix in consecutive wrk runs,
sampled each interval, and the verdict on memory, open files and errors."""
