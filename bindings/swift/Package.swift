// swift-tools-version:5.7
// libroute for Swift: the uniffi-generated Sources/Libroute/Libroute.swift and the C module
// Sources/librouteFFI (both committed, written by `cargo xtask codegen`) over libroute_uniffi.
// Build the library first: `cargo build --release -p libroute-uniffi` (from the repository root);
// `cargo xtask swift` does that and runs `swift test` where a Swift toolchain exists.
import PackageDescription

let package = Package(
    name: "Libroute",
    products: [
        .library(name: "Libroute", targets: ["Libroute"]),
    ],
    targets: [
        .systemLibrary(name: "librouteFFI", path: "Sources/librouteFFI"),
        .target(
            name: "Libroute",
            dependencies: ["librouteFFI"],
            path: "Sources/Libroute",
            linkerSettings: [
                .linkedLibrary("route_uniffi"),
                .unsafeFlags(["-L../../target/release"]),
            ]
        ),
        .testTarget(
            name: "LibrouteTests",
            dependencies: ["Libroute"],
            path: "Tests/LibrouteTests"
        ),
    ]
)
