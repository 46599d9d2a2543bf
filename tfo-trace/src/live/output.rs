//! The two streams every command writes, and the one rule for both: a reader that went
//! away (`| head -1`, `2>&1 | head -1`) ends the command quietly, exit 0. Writes to stdout
//! and stderr go through here, so that a closed pipe becomes [`OutputClosed`] (which
//! `main` turns into exit 0) instead of an error message or a panic (`eprintln!` panics
//! when stderr is gone, and the panic message has nowhere to go: exit 101).
use std::io::{self, Write as _};

/// stdout or stderr is a pipe whose reader is gone: the command ends here, quietly.
#[derive(Debug)]
pub struct OutputClosed;

impl std::fmt::Display for OutputClosed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the reader of stdout or stderr went away")
    }
}

impl std::error::Error for OutputClosed {}

/// A line on stderr (a note, a closing line). Err only when stderr's reader is gone;
/// other write errors (a full disk under `2>file`) are not worth failing the command.
pub fn note(args: std::fmt::Arguments<'_>) -> Result<(), OutputClosed> {
    let mut err = io::stderr().lock();
    match err.write_fmt(args).and_then(|()| err.write_all(b"\n")) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Err(OutputClosed),
        _ => Ok(()),
    }
}

/// `note!("...", args)`: [`note`] with `format!`'s arguments.
#[macro_export]
macro_rules! note {
    ($($arg:tt)*) => {
        $crate::live::output::note(format_args!($($arg)*))
    };
}

/// What writing to stdout gave: a closed pipe becomes [`OutputClosed`], any other error
/// says it was stdout.
pub fn stdout_written(r: io::Result<()>) -> anyhow::Result<()> {
    match r {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Err(OutputClosed.into()),
        r => Ok(anyhow::Context::context(r, "writing to stdout")?),
    }
}

/// Whether `err` is, anywhere in its chain, stdout or stderr closed.
pub fn is_output_closed(err: &anyhow::Error) -> bool {
    err.chain().any(|e| e.is::<OutputClosed>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closed_stdout_is_told_apart_from_other_errors() {
        let closed = stdout_written(Err(io::ErrorKind::BrokenPipe.into())).unwrap_err();
        assert!(is_output_closed(&closed));
        assert!(is_output_closed(&closed.context("printing the report")));
        let full = stdout_written(Err(io::Error::from_raw_os_error(libc::ENOSPC))).unwrap_err();
        assert!(!is_output_closed(&full));
        assert!(format!("{full:#}").starts_with("writing to stdout: "), "{full:#}");
        assert!(stdout_written(Ok(())).is_ok());
    }
}
