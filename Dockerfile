# The daemon's image: make image (docs in deploy/README.md).
#
# Build stage: the Go of go.mod, no cgo, stamped with the version make image
# passes. The binary is still linked against glibc's loader: the cuda
# transport dlopens the NVIDIA driver at run time (purego), so the run stage
# needs glibc (distroless base, not static or scratch).
FROM docker.io/library/golang:1.26.8-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG DATALOADERD_VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-X main.version=${DATALOADERD_VERSION}" \
    -o /out/dataloaderd ./cmd/dataloaderd

# Run stage: glibc, the binary and CA roots, as the unprivileged user
# the Kubernetes manifest runs the pod as (ring files are 0600: trainer and
# daemon must share it).
FROM gcr.io/distroless/base-debian12:nonroot
COPY --from=build /out/dataloaderd /usr/local/bin/dataloaderd
USER 1000:1000
ENTRYPOINT ["/usr/local/bin/dataloaderd"]
CMD ["serve"]
