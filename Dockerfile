# kasi in a container: build with the Rust toolchain, run on a small Debian
# with only the binary, as a non-root user, the store on a volume.
#
#   docker build -t kasi .
#   docker run -p 3000:3000 -p 127.0.0.1:3001:3001 -v kasi-data:/var/lib/kasi kasi
#
# The admin address listens on all interfaces inside the container, so it
# needs credentials (--admin-tokens) unless you pass --admin-insecure and
# keep the published port on loopback as above.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p kasi && strip target/release/kasi

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home /var/lib/kasi --shell /usr/sbin/nologin kasi \
 && install -d -o kasi -g kasi -m 0750 /var/lib/kasi
COPY --from=build /src/target/release/kasi /usr/local/bin/kasi
USER kasi
VOLUME /var/lib/kasi
EXPOSE 3000 3001
ENV KASI_DATA_DIR=/var/lib/kasi \
    KASI_API_LISTEN=0.0.0.0:3000 \
    KASI_ADMIN_LISTEN=0.0.0.0:3001 \
    KASI_LOG_FORMAT=json
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s \
  CMD curl -fsS http://127.0.0.1:3000/health/ready || exit 1
ENTRYPOINT ["/usr/local/bin/kasi"]
CMD ["serve"]
