# syntax=docker/dockerfile:1
# Build: docker build -t taskgate .
# Run:   docker run --rm -p 8080:8080 -p 8081:8081 taskgate --upstream http://mcp-server:3000/mcp
#
# The image listens on 0.0.0.0:8080 (proxy) and 0.0.0.0:8081 (admin:
# /healthz, /readyz, /readyz/store, /metrics), set through TASKGATE_LISTEN
# and TASKGATE_ADMIN_LISTEN; change them with the variables (`-e`), not
# with flags, so the HEALTHCHECK (taskgate healthcheck, which reads
# TASKGATE_ADMIN_LISTEN) keeps finding the admin server.
#
# The demo MCP server (cmd/legacy-mcp, for trying taskgate) is not in this
# image; build it on its own with: docker build --target demo -t taskgate-demo .
#
# Base images. The build image is pinned to the exact Go release the
# project is tested with. distroless publishes no version tags, only
# moving ones (nonroot) and digests: pin the runtime by digest for a
# reproducible image, e.g.
#   docker build --build-arg RUNTIME=gcr.io/distroless/static-debian12:nonroot@sha256:<digest> .
# with the digest from `crane digest gcr.io/distroless/static-debian12:nonroot`
# (or `docker buildx imagetools inspect`), and the same for BUILD.
ARG BUILD=golang:1.26.8-bookworm
ARG RUNTIME=gcr.io/distroless/static-debian12:nonroot
FROM ${BUILD} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/taskgate ./cmd/taskgate

FROM build AS build-demo
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/legacy-mcp ./cmd/legacy-mcp

# The demo upstream: docker run --rm -p 3000:3000 taskgate-demo
FROM ${RUNTIME} AS demo
COPY --from=build-demo /out/legacy-mcp /usr/local/bin/legacy-mcp
USER nonroot:nonroot
EXPOSE 3000
ENTRYPOINT ["/usr/local/bin/legacy-mcp", "--listen", "0.0.0.0:3000"]

# The production image (the default target). distroless static: no shell,
# no package manager, CA certificates for https upstreams and rediss://,
# runs as uid 65532.
FROM ${RUNTIME}
COPY --from=build /out/taskgate /usr/local/bin/taskgate
ENV TASKGATE_LISTEN=0.0.0.0:8080 \
    TASKGATE_ADMIN_LISTEN=0.0.0.0:8081
USER nonroot:nonroot
EXPOSE 8080 8081
HEALTHCHECK --interval=10s --timeout=5s --start-period=5s --retries=3 \
  CMD ["/usr/local/bin/taskgate", "healthcheck", "--path", "/readyz"]
ENTRYPOINT ["/usr/local/bin/taskgate"]
