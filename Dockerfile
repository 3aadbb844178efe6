# plantstore in a container: a builder stage makes the wheel, the runtime stage installs only
# that wheel (pinned by constraints.txt) and runs it as an unprivileged user with its SQLite
# database on the /data volume. tests/e2e/test_packaging.py checks this file and runs the runtime
# stage's install command against a freshly built wheel; tests/e2e/test_container.py builds it
# with podman on a Debian bookworm base and runs the image (docs/operating.md, Containers).
#
#   docker build -t plantstore .
#   podman build --format docker -t plantstore .   # podman's default (OCI) format drops HEALTHCHECK
#   docker run -d --name plantstore -p 8000:8000 -v plantstore-data:/data \
#       --read-only --tmpfs /tmp plantstore

# Any Debian-based image with python3 (>= 3.11) as `python`, its venv module and apt. Pin it
# where you build: python:3.11-slim-bookworm@sha256:<digest> (docker buildx imagetools inspect
# names it), or a locally made base by the tag you import it under; CI's is made with
# debootstrap from bookworm and has no registry digest.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS builder
WORKDIR /src
COPY constraints.txt ./
# A venv of its own: a Debian base's system python has no pip (and is externally managed).
RUN python -m venv /opt/build
ENV PATH=/opt/build/bin:$PATH
RUN pip install --no-cache-dir --disable-pip-version-check -c constraints.txt build
COPY pyproject.toml README.md LICENSE ./
COPY src/ src/
RUN python -m build --wheel --outdir /wheels .

FROM ${PYTHON_IMAGE} AS runtime
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/plantstore/bin:$PATH
# tini is PID 1: it reaps the orphans a process in the container leaves (an exec'd shell's
# children; the server itself does not wait on processes it did not start) and passes SIGTERM
# on to the server. Debian's package, from the same signed archive as the base's python:
# nothing to download and checksum by hand, and no `--init` for every operator to remember.
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends tini \
    && rm -rf /var/lib/apt/lists/*
COPY constraints.txt /tmp/constraints.txt
COPY --from=builder /wheels/ /tmp/wheels/
# pip and setuptools install the wheel, then go: nothing at run time installs anything.
# (python:*-slim's system python has them too; a Debian python3 has neither.)
RUN (! python -m pip --version >/dev/null 2>&1 || python -m pip uninstall -y -q pip setuptools wheel) \
    && python -m venv /opt/plantstore \
    && /opt/plantstore/bin/pip install --no-cache-dir --disable-pip-version-check \
        -c /tmp/constraints.txt /tmp/wheels/plantstore-*.whl \
    && /opt/plantstore/bin/python -m pip uninstall -y -q pip setuptools \
    && rm -rf /tmp/wheels /tmp/constraints.txt \
    && groupadd --system --gid 10001 plantstore \
    && useradd --system --uid 10001 --gid plantstore --home-dir /data --no-create-home \
        --shell /usr/sbin/nologin plantstore \
    && mkdir -p /data \
    && chown plantstore:plantstore /data

# Created and owned above, so a fresh named volume starts out writable by the service.
VOLUME /data
WORKDIR /data
# The metrics listener answers outside the container too; publish 9464 only to the scraper.
ENV PLANTSTORE_DATABASE_URL=sqlite:////data/plantstore.db \
    PLANTSTORE_HOST=0.0.0.0 \
    PLANTSTORE_PORT=8000 \
    PLANTSTORE_METRICS_ADDRESS=0.0.0.0:9464
USER 10001:10001
EXPOSE 8000 9464

# /readyz is 200 only when the database answers. `plantstore health` asks it at the address
# `plantstore serve` recorded in /tmp, so `serve --port 9000` (a flag, not the environment) is
# followed too; it exits 1 with one line on a 503, no answer or no server.
HEALTHCHECK --interval=10s --timeout=3s --start-period=15s --retries=3 \
    CMD ["plantstore", "health"]

# granian shuts down cleanly on SIGTERM (docker stop), which tini passes on; the first start
# prints a token for user 'default' to the log (docker logs). With --read-only, give /tmp a
# tmpfs: the server's runtime files go there, and it refuses to put them in /data.
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["plantstore", "serve"]
