# syntax=docker/dockerfile:1
# Build: docker build -t taskgate .
# Run:   docker run --rm -p 8080:8080 taskgate --listen 0.0.0.0:8080 --upstream http://mcp-server:3000/mcp
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/taskgate ./cmd/taskgate \
 && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/legacy-mcp ./cmd/legacy-mcp

# distroless static: no shell, no package manager, CA certificates for
# https upstreams and rediss://, runs as uid 65532.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/taskgate /usr/local/bin/taskgate
COPY --from=build /out/legacy-mcp /usr/local/bin/legacy-mcp
USER nonroot:nonroot
EXPOSE 8080 9090
ENTRYPOINT ["/usr/local/bin/taskgate"]
