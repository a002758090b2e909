//! The fake model server's integration tests, one binary: the binary as a benchmark script uses
//! it, and its wire output as raw HTTP.

mod bin;
mod server;
