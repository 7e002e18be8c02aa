# The stampede binary in a distroless image: one static binary, no shell,
# run as a non-root user. Every service is a subcommand:
#
#   docker build -t stampede .
#   docker run --rm -p 8080:8080 -e STAMPEDE_ADMIN_TOKEN=... stampede serve waitroom --http :8080
#
# deploy/compose.yaml runs the whole platform. No Docker engine runs on the
# development machine: cmd/stampede's TestDockerfile runs this file's build
# command and checks that the binary is static.

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /stampede ./cmd/stampede

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /stampede /stampede
USER 65532:65532
ENTRYPOINT ["/stampede"]
CMD ["--help"]
