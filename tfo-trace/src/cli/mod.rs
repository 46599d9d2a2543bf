//! Command-line interface: the flags and subcommands clap parses (`args.rs`), and the one
//! step that turns them into what the stages below take (`options.rs`: the loader's
//! `LoadOptions`, each view's options). No view reads a clap type.
mod args;
mod options;

pub use args::*;
pub use options::*;
