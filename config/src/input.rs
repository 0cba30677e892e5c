//! Bounded reading of the files a user names.
//!
//! Every file Tally's tools read on a user's say (tally.toml, scenarios,
//! ledgers, traces, slurm.conf, saved Slurm output) goes through
//! [`read_text`], with a bound on its size stated by the caller:
//!
//! 1. `stat` the path (following symbolic links) and refuse anything that
//!    is not a regular file, by what it is: opening a FIFO blocks until a
//!    writer comes, a device such as /dev/zero never ends, a directory or
//!    a socket has no text to give;
//! 2. open it with `O_NONBLOCK` (a FIFO swapped in after the `stat` then
//!    opens at once instead of blocking) and check the opened file again;
//! 3. read through a reader that stops one byte past the bound: memory is
//!    bounded whatever the file system says the size is (/proc files say
//!    0; a file may grow while it is read);
//! 4. UTF-8, or a refusal that says so.
//!
//! [`read_stream`] does steps 3 and 4 for standard input (`-`);
//! [`open_bounded`] steps 1 to 3 for a reader that parses as it reads
//! (a saved `squeue --json` of tens of MiB), and [`Bounded`] step 3 for a
//! command's output.
//!
//! Every refusal says what is wrong and what is allowed:
//!
//! ```text
//! /dev/zero: is a character device, not a regular file: a ledger is read from a regular file
//! big.state: the file is 314572800 bytes (300 MiB); a ledger may be at most 268435456 bytes (256 MiB)
//! ```

use std::fmt;
use std::fs::{File, FileType, Metadata, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// Why a file was not read. The [`fmt::Display`] names neither the path
/// nor the key: callers put the path in front (`FILE: ...`).
#[derive(Debug)]
pub enum InputError {
    /// `stat`, `open` or `read` failed; the error's kind tells a missing
    /// file from a forbidden one.
    Io(io::Error),
    /// Not a regular file: `kind` is what it is ("a FIFO").
    NotRegular { kind: &'static str, what: String },
    /// More than `max` bytes. `size`: the file's size when the file system
    /// knows it to be over `max`; `None` when only the read found out (a
    /// file that grew, /proc, standard input).
    TooBig { size: Option<u64>, max: u64, what: String, stream: bool },
    /// Bytes that are not UTF-8.
    NotUtf8 { error: std::str::Utf8Error, what: String },
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InputError::Io(e) => write!(f, "cannot read: {e}"),
            InputError::NotRegular { kind: "", what } => write!(f, "is not a regular file: {what} is read from a regular file"),
            InputError::NotRegular { kind, what } => write!(f, "is {kind}, not a regular file: {what} is read from a regular file"),
            InputError::TooBig { size, max, what, stream } => {
                let noun = if *stream { "the input" } else { "the file" };
                match size {
                    Some(n) => write!(f, "{noun} is {}", bytes(*n))?,
                    None => write!(f, "{noun} is more than {max} bytes")?,
                }
                write!(f, "; {what} may be at most {}", bytes(*max))
            }
            InputError::NotUtf8 { error, what } => write!(f, "cannot read: not UTF-8 text ({error}): {what} is UTF-8 text"),
        }
    }
}

impl std::error::Error for InputError {}

impl InputError {
    /// The IO error's kind, if it is one (a missing file: `NotFound`).
    pub fn io_kind(&self) -> Option<io::ErrorKind> {
        match self {
            InputError::Io(e) => Some(e.kind()),
            _ => None,
        }
    }
}

/// `n` in human units: `512 bytes`, `16 MiB`, `300.0 MiB`, `1 GiB`.
pub fn human(n: u64) -> String {
    for (unit, size) in [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
        if n >= size {
            return if n % size == 0 { format!("{} {unit}", n / size) } else { format!("{:.1} {unit}", n as f64 / size as f64) };
        }
    }
    format!("{n} bytes")
}

/// `n` exactly, and in human units when that says more: `16777217 bytes (16.0 MiB)`.
fn bytes(n: u64) -> String {
    if n < 1024 {
        format!("{n} bytes")
    } else {
        format!("{n} bytes ({})", human(n))
    }
}

/// What a file that is not regular is, for the refusal; "" when it is
/// none of the kinds named.
fn kind(t: FileType) -> &'static str {
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        ""
    }
}

fn regular(meta: &Metadata, what: &str) -> Result<(), InputError> {
    if meta.is_file() {
        Ok(())
    } else {
        Err(InputError::NotRegular { kind: kind(meta.file_type()), what: what.to_string() })
    }
}

/// The regular file at `path`, opened (steps 1 and 2): refused when it is
/// not a regular file or the file system says it is over `max_bytes`.
fn open_regular(path: &Path, what: &str, max_bytes: u64) -> Result<(File, Metadata), InputError> {
    regular(&std::fs::metadata(path).map_err(InputError::Io)?, what)?;
    let f = OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path).map_err(InputError::Io)?;
    // The path may have changed between the stat and the open.
    let meta = f.metadata().map_err(InputError::Io)?;
    regular(&meta, what)?;
    if meta.len() > max_bytes {
        return Err(InputError::TooBig { size: Some(meta.len()), max: max_bytes, what: what.to_string(), stream: false });
    }
    Ok((f, meta))
}

/// The bytes of the regular file at `path`, at most `max_bytes` of them;
/// `what` names the kind of file in refusals ("a ledger"). See the module
/// documentation for the steps.
pub fn read_bytes(path: &Path, what: &str, max_bytes: u64) -> Result<Vec<u8>, InputError> {
    let (f, meta) = open_regular(path, what, max_bytes)?;
    // Room for the whole file and the byte that would say it grew past
    // the bound: one allocation for a file that holds still.
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len().saturating_add(1)).unwrap_or(0));
    (&f).take(max_bytes.saturating_add(1)).read_to_end(&mut bytes).map_err(InputError::Io)?;
    if bytes.len() as u64 > max_bytes {
        let size = f.metadata().ok().map(|m| m.len()).filter(|&n| n > max_bytes);
        return Err(InputError::TooBig { size, max: max_bytes, what: what.to_string(), stream: false });
    }
    Ok(bytes)
}

/// The regular file at `path` as a stream of at most `max_bytes` (steps 1
/// to 3 for a reader that parses as it reads, holding no copy of the
/// whole file): see [`Bounded`].
pub fn open_bounded(path: &Path, what: &str, max_bytes: u64) -> Result<Bounded<File>, InputError> {
    let (f, _) = open_regular(path, what, max_bytes)?;
    Ok(Bounded::new(f, what, max_bytes, false))
}

/// A reader that gives at most `max` bytes of `inner` and then fails, with
/// an [`io::Error`] of kind `InvalidData` that carries
/// [`InputError::TooBig`], if there is more.
#[derive(Debug)]
pub struct Bounded<R> {
    inner: R,
    left: u64,
    max: u64,
    what: String,
    stream: bool,
}

impl<R: Read> Bounded<R> {
    /// `stream`: `inner` is a stream (standard input, a command's output),
    /// not a file, for the refusal's words.
    pub fn new(inner: R, what: &str, max: u64, stream: bool) -> Bounded<R> {
        Bounded { inner, left: max, max, what: what.to_string(), stream }
    }
}

impl<R: Read> Read for Bounded<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if self.left == 0 {
            // At the bound: one more byte means too much.
            let mut probe = [0u8; 1];
            return match self.inner.read(&mut probe)? {
                0 => Ok(0),
                _ => Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    InputError::TooBig { size: None, max: self.max, what: self.what.clone(), stream: self.stream },
                )),
            };
        }
        let room = usize::try_from(self.left).unwrap_or(usize::MAX).min(buf.len());
        let n = self.inner.read(&mut buf[..room])?;
        self.left -= n as u64;
        Ok(n)
    }
}

/// The regular file at `path` as UTF-8 text, at most `max_bytes` of it
/// ([`read_bytes`], then UTF-8 or a refusal).
pub fn read_text(path: &Path, what: &str, max_bytes: u64) -> Result<String, InputError> {
    utf8(read_bytes(path, what, max_bytes)?, what)
}

/// A stream (standard input: `tally trace import -`) as UTF-8 text, at
/// most `max_bytes` of it: it is read through a reader that stops one byte
/// past the bound.
pub fn read_stream(r: impl Read, what: &str, max_bytes: u64) -> Result<String, InputError> {
    let mut bytes = Vec::new();
    r.take(max_bytes.saturating_add(1)).read_to_end(&mut bytes).map_err(InputError::Io)?;
    if bytes.len() as u64 > max_bytes {
        return Err(InputError::TooBig { size: None, max: max_bytes, what: what.to_string(), stream: true });
    }
    utf8(bytes, what)
}

fn utf8(bytes: Vec<u8>, what: &str) -> Result<String, InputError> {
    String::from_utf8(bytes).map_err(|e| InputError::NotUtf8 { error: e.utf8_error(), what: what.to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use std::sync::mpsc;
    use std::time::Duration;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tally-input-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// `f()` on another thread; `None` if it has not returned within a
    /// minute (a read that blocks fails the test instead of hanging it).
    fn at_once<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(Duration::from_secs(60)).ok()
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let d = dir("fifo");
        let fifo = d.join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
        assert!(made.success());
        // No writer ever comes: open(2) without O_NONBLOCK would wait forever.
        let path = fifo.clone();
        let err = at_once(move || read_text(&path, "a ledger", 1024).unwrap_err().to_string()).expect("refused at once, not blocked");
        assert_eq!(err, "is a FIFO, not a regular file: a ledger is read from a regular file");
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn devices_and_directories_are_refused_by_what_they_are() {
        let err = at_once(|| read_text(Path::new("/dev/zero"), "a ledger", 1 << 20).unwrap_err().to_string()).expect("at once");
        assert_eq!(err, "is a character device, not a regular file: a ledger is read from a regular file");
        let d = dir("directory");
        let err = read_text(&d, "a trace", 1024).unwrap_err().to_string();
        assert_eq!(err, "is a directory, not a regular file: a trace is read from a regular file");
        // A symbolic link is followed: to a regular file it is read.
        std::fs::write(d.join("real"), "x").unwrap();
        std::os::unix::fs::symlink(d.join("real"), d.join("link")).unwrap();
        assert_eq!(read_text(&d.join("link"), "a trace", 1024).unwrap(), "x");
        std::os::unix::fs::symlink("/dev/zero", d.join("zero")).unwrap();
        assert!(read_text(&d.join("zero"), "a trace", 1024).unwrap_err().to_string().starts_with("is a character device"));
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn a_file_at_the_bound_is_read_and_one_byte_over_is_refused() {
        let d = dir("bound");
        let (at, over) = (d.join("at"), d.join("over"));
        std::fs::write(&at, "x".repeat(100)).unwrap();
        std::fs::write(&over, "x".repeat(101)).unwrap();
        assert_eq!(read_text(&at, "a trace", 100).unwrap().len(), 100);
        assert_eq!(read_text(&over, "a trace", 100).unwrap_err().to_string(), "the file is 101 bytes; a trace may be at most 100 bytes");
        // Human units past a KiB.
        let big = d.join("big");
        std::fs::write(&big, vec![b'x'; 3 * 1024 + 512]).unwrap();
        assert_eq!(
            read_text(&big, "slurm.conf", 2048).unwrap_err().to_string(),
            "the file is 3584 bytes (3.5 KiB); slurm.conf may be at most 2048 bytes (2 KiB)"
        );
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn a_file_whose_size_says_nothing_is_still_bounded() {
        // /proc files say 0 bytes: only the read finds out.
        let err = read_text(Path::new("/proc/self/maps"), "a trace", 10).unwrap_err().to_string();
        assert_eq!(err, "the file is more than 10 bytes; a trace may be at most 10 bytes");
    }

    #[test]
    fn bytes_that_are_not_utf8_are_refused() {
        let d = dir("utf8");
        let path = d.join("latin1");
        std::fs::write(&path, b"caf\xe9\n").unwrap();
        let err = read_text(&path, "a trace", 1024).unwrap_err().to_string();
        assert_eq!(err, "cannot read: not UTF-8 text (invalid utf-8 sequence of 1 bytes from index 3): a trace is UTF-8 text");
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn a_missing_file_keeps_its_io_error() {
        let e = read_text(Path::new("/nonexistent/tally"), "a ledger", 10).unwrap_err();
        assert_eq!(e.io_kind(), Some(io::ErrorKind::NotFound));
        assert!(e.to_string().starts_with("cannot read: No such file or directory"), "{e}");
    }

    #[test]
    fn a_stream_is_bounded_too() {
        assert_eq!(read_stream(&b"0123456789"[..], "a trace", 10).unwrap(), "0123456789");
        // An endless stream (as /dev/zero on stdin) stops one byte past the bound.
        let err = read_stream(io::repeat(b'x'), "a trace", 1 << 20).unwrap_err().to_string();
        assert_eq!(err, "the input is more than 1048576 bytes; a trace may be at most 1048576 bytes (1 MiB)");
        assert!(read_stream(&b"\xff"[..], "a trace", 10).unwrap_err().to_string().starts_with("cannot read: not UTF-8 text"));
    }

    #[test]
    fn human_units() {
        assert_eq!(human(512), "512 bytes");
        assert_eq!(human(16 << 20), "16 MiB");
        assert_eq!(human(300 << 20), "300 MiB");
        assert_eq!(human((256 << 20) + 1), "256.0 MiB");
        assert_eq!(human(1 << 30), "1 GiB");
        assert_eq!(human(3 << 29), "1.5 GiB");
    }

    #[test]
    fn a_bounded_reader_gives_up_to_its_bound_and_refuses_one_byte_more() {
        let mut out = Vec::new();
        Bounded::new(&b"0123456789"[..], "saved output", 10, true).read_to_end(&mut out).unwrap();
        assert_eq!(out, b"0123456789");
        let mut out = Vec::new();
        let err = Bounded::new(&b"0123456789x"[..], "saved output", 10, true).read_to_end(&mut out).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert_eq!(err.to_string(), "the input is more than 10 bytes; saved output may be at most 10 bytes");
        assert_eq!(out, b"0123456789", "the bound's bytes, then the refusal");
    }

    #[test]
    fn open_bounded_refuses_what_read_text_refuses() {
        let d = dir("bounded");
        let f = d.join("big.json");
        std::fs::write(&f, "x".repeat(2048)).unwrap();
        let err = open_bounded(&f, "saved output", 1024).unwrap_err().to_string();
        assert_eq!(err, "the file is 2048 bytes (2 KiB); saved output may be at most 1024 bytes (1 KiB)");
        assert!(open_bounded(&d, "saved output", 1024).unwrap_err().to_string().starts_with("is a directory"));
        let mut text = String::new();
        open_bounded(&f, "saved output", 4096).unwrap().read_to_string(&mut text).unwrap();
        assert_eq!(text.len(), 2048);
        std::fs::remove_dir_all(d).unwrap();
    }
}
