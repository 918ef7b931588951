# coding-agent-exporter image. Used by docker-compose.yml; on its own:
#   docker build -t coding-agent-exporter .
#   docker run --rm -p 127.0.0.1:9877:9877 \
#     -v ~/.claude/projects:/data/claude/projects:ro \
#     -v ~/.codex/sessions:/data/codex/sessions:ro \
#     -v coding-agent-exporter-state:/var/lib/coding-agent-exporter \
#     coding-agent-exporter
FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY pyproject.toml README.md ./
COPY exporter ./exporter
RUN pip install . && rm -rf /src

COPY config/docker.yml /etc/coding-agent-exporter/config.yml

# Runs as uid 1000 (the usual desktop user, so transcripts readable only by
# their owner stay readable through the bind mounts) and gid 0; the state dir
# is group-writable so another uid with gid 0 (compose's EXPORTER_UID) works too.
RUN useradd --system --uid 1000 --gid 0 --no-create-home \
        --home-dir /var/lib/coding-agent-exporter exporter \
    && mkdir -p /var/lib/coding-agent-exporter \
    && chown 1000:0 /var/lib/coding-agent-exporter \
    && chmod 0775 /var/lib/coding-agent-exporter
USER 1000:0
WORKDIR /var/lib/coding-agent-exporter
VOLUME ["/var/lib/coding-agent-exporter"]

EXPOSE 9877
# Works with --web.config.file too: it tries HTTP, then HTTPS, and takes a
# 401 (basic auth on) as the server answering (exporter/healthcheck.py).
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s \
    CMD ["python", "-m", "coding_agent_exporter.healthcheck", "127.0.0.1:9877"]

ENTRYPOINT ["coding-agent-exporter"]
CMD ["run", "--config.file=/etc/coding-agent-exporter/config.yml", "--web.listen-address=0.0.0.0:9877"]
