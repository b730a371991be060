//! Benchmarks and tools around libroute-core: the criterion benchmarks in `benches/` and the
//! `cargo demo` binary. This crate is not published; its crate documentation is the project
//! README, so the README's Rust example is compiled and run as a doctest.
#![doc = include_str!("../../README.md")]
