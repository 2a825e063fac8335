//! Reading the files a manifest names, and the manifest itself, so that no
//! file can hang or exhaust the gateway: only a regular file is read (a FIFO
//! would block `check` forever, `/dev/zero` would never end), its size is
//! checked before it is opened, and it is read through a limit, so a file
//! that grows or is swapped after the check is cut off all the same.

use std::fs::{File, Metadata, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

use super::bounds::show_size;

/// Why a file was not read.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("not a regular file ({0})")]
    NotRegular(&'static str),
    #[error("larger than {} ({size} bytes)", show_size(*limit))]
    TooLarge { size: u64, limit: u64 },
}

impl From<FileError> for std::io::Error {
    fn from(error: FileError) -> std::io::Error {
        match error {
            FileError::Io(error) => error,
            other => std::io::Error::new(std::io::ErrorKind::InvalidInput, other.to_string()),
        }
    }
}

/// Checks, without opening it, that `path` (or what a symlink there points
/// to) is a regular file of at most `limit` bytes.
pub(crate) fn check_regular(path: &Path, limit: u64) -> Result<(), FileError> {
    admissible(&std::fs::metadata(path)?, limit)
}

/// The whole content of the regular file at `path`, at most `limit` bytes.
pub(crate) fn read_limited(path: &Path, limit: u64) -> Result<Vec<u8>, FileError> {
    check_regular(path, limit)?;
    // Non-blocking, so that a FIFO put in the file's place since the check
    // does not block the open; what was opened is checked again.
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let metadata = file.metadata()?;
    admissible(&metadata, limit)?;
    read_at_most(file, metadata.len(), limit)
}

fn read_at_most(file: File, expected: u64, limit: u64) -> Result<Vec<u8>, FileError> {
    let mut bytes = Vec::with_capacity(usize::try_from(expected.min(limit)).unwrap_or(0));
    // One byte more than allowed tells a file that grew past the limit.
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    let size = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
    if size > limit {
        return Err(FileError::TooLarge { size, limit });
    }
    Ok(bytes)
}

fn admissible(metadata: &Metadata, limit: u64) -> Result<(), FileError> {
    let kind = metadata.file_type();
    if !kind.is_file() {
        return Err(FileError::NotRegular(if kind.is_dir() {
            "a directory"
        } else if kind.is_fifo() {
            "a FIFO"
        } else if kind.is_char_device() {
            "a character device"
        } else if kind.is_block_device() {
            "a block device"
        } else if kind.is_socket() {
            "a socket"
        } else {
            "a special file"
        }));
    }
    if metadata.len() > limit {
        return Err(FileError::TooLarge {
            size: metadata.len(),
            limit,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_regular_file_under_the_limit_is_read_whole() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("small");
        std::fs::write(&path, b"hello").expect("write");
        assert_eq!(read_limited(&path, 5).expect("read"), b"hello");
        let refused = read_limited(&path, 4).expect_err("over the limit");
        assert!(matches!(refused, FileError::TooLarge { size: 5, limit: 4 }));
    }

    #[test]
    fn devices_fifos_and_directories_are_refused_without_reading() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let fifo = dir.path().join("fifo");
        let name = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).expect("a path");
        // SAFETY: a valid NUL-terminated path; mkfifo has no other input.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
        for (path, kind) in [
            (fifo.as_path(), "a FIFO"),
            (Path::new("/dev/zero"), "a character device"),
            (dir.path(), "a directory"),
        ] {
            match read_limited(path, 1 << 20) {
                Err(FileError::NotRegular(found)) => assert_eq!(found, kind, "{path:?}"),
                other => panic!("{path:?}: {other:?}"),
            }
        }
    }
}
