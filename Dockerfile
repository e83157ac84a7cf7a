# Operator image: a static-ish release build on a distroless, non-root base.
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin slice-operator

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/slice-operator /slice-operator
USER 65532:65532
ENTRYPOINT ["/slice-operator"]
CMD ["run"]
