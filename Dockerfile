# Tether's image: one static `tether` binary on distroless, as a non-root
# user. The chart runs it as `tether agent` or `tether hub` (args), and
# `docker run IMAGE version` prints its version.
#
#   docker build --build-arg VERSION=v0.1.0 -t ghcr.io/tetherhq/tether:v0.1.0 .
#
# The binary is built by `make static`, the same command `make test` checks
# for a static, stamped binary (test/image).

FROM --platform=$BUILDPLATFORM golang:1.26 AS build
WORKDIR /src
# Modules first, so that a change to the code does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=v0.1.0-dev
ARG TARGETOS
ARG TARGETARCH
RUN GOOS=$TARGETOS GOARCH=$TARGETARCH make static VERSION="$VERSION" OUT=/out/tether

FROM gcr.io/distroless/static:nonroot
COPY --from=build /out/tether /tether
# distroless's nonroot user (65532), which the chart's podSecurityContext names.
USER 65532:65532
ENTRYPOINT ["/tether"]
CMD ["version"]
