# plantstore in a container: a builder stage makes the wheel, the runtime stage installs only
# that wheel (pinned by constraints.txt) and runs it as an unprivileged user with its SQLite
# database on the /data volume. tests/e2e/test_packaging.py checks this file and runs the runtime
# stage's install command against a freshly built wheel.
#
#   docker build -t plantstore .
#   docker run -d --name plantstore -p 8000:8000 -v plantstore-data:/data plantstore

ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS builder
WORKDIR /src
COPY constraints.txt ./
RUN pip install --no-cache-dir --disable-pip-version-check -c constraints.txt build
COPY pyproject.toml README.md LICENSE ./
COPY src/ src/
RUN python -m build --wheel --outdir /wheels .

FROM ${PYTHON_IMAGE} AS runtime
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/plantstore/bin:$PATH
COPY constraints.txt /tmp/constraints.txt
COPY --from=builder /wheels/ /tmp/wheels/
RUN python -m venv /opt/plantstore \
    && /opt/plantstore/bin/pip install --no-cache-dir --disable-pip-version-check \
        -c /tmp/constraints.txt /tmp/wheels/plantstore-*.whl \
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

# /readyz is 200 only when the database answers; urllib raises (exit 1) on a 503 or no answer.
HEALTHCHECK --interval=10s --timeout=3s --start-period=15s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('PLANTSTORE_PORT', '8000') + '/readyz', timeout=2)"]

# granian shuts down cleanly on SIGTERM (docker stop); the first start prints a token for
# user 'default' to the log (docker logs).
CMD ["plantstore", "serve"]
