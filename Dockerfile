# syntax=docker/dockerfile:1
# Panager application image: build wheels in a builder stage, install them into a
# slim runtime with no compilers, run as a non-root user.
FROM python:3.12-slim AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip wheel --wheel-dir /wheels .

FROM python:3.12-slim
ENV PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 \
    PANAGER_HOME=/data PANAGER_HTTP_HOST=0.0.0.0 PANAGER_HTTP_PORT=8765
RUN useradd --create-home --uid 10001 panager && mkdir -p /data && chown panager /data
COPY --from=builder /wheels /wheels
RUN pip install --no-index --find-links=/wheels panager && rm -rf /wheels
USER panager
WORKDIR /home/panager
VOLUME ["/data"]
EXPOSE 8765
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
  CMD python -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8765/healthz', timeout=4).status == 200 else 1)"
ENTRYPOINT ["panager"]
CMD ["run"]
