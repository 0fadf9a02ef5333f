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
# Base images, pinned by digest: a rebuild of the same commit gets the same
# bases (a tag such as golang:1.26.8-bookworm is rebuilt upstream for
# Debian fixes, and distroless publishes only moving tags like nonroot).
# The tag stays in front of the digest for readers; the digest alone
# decides what is pulled. Both are multi-architecture index digests (the
# same for amd64 and arm64). To refresh, resolve the tag again and replace
# the digest:
#   crane digest golang:1.26.8-bookworm
#   crane digest gcr.io/distroless/static-debian12:nonroot
# (or `docker buildx imagetools inspect <image:tag>`, the "Digest:" line).
# cmd/taskgate's TestDockerfilePinned fails on an unpinned base.
# Override for a one-off build with --build-arg BUILD=... / RUNTIME=...
ARG BUILD=golang:1.26.8-bookworm@sha256:a688600ca24f8a4d3ca77f95b0dd40704a9fc787c826660eb7ba0b641b8b175d
ARG RUNTIME=gcr.io/distroless/static-debian12:nonroot@sha256:afa5c872c891853ca7fcf1f12c3edb23f7eeef36189728842dd51042ff57f7ab
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
