//! The embedded store's files are private: webhook bodies carry customer data.
//!
//! The store directory is 0700 and the database files 0600, whatever the umask:
//! the directory is created with its mode and the database file is created here,
//! 0600, before SQLite opens it. SQLite's unix VFS gives the `-wal` and `-shm` files
//! it creates the mode of the database file (it `fchmod`s them), so they follow.
//!
//! What an older run left with looser modes is tightened, and each change is logged.
//! A directory writable by others is refused instead: someone else may already have
//! placed files (or links) in it, and tightening it would hide that.

use std::fs::{DirBuilder, OpenOptions, Permissions};
use std::io::ErrorKind;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::Path;

use crate::store::StoreError;

/// The store directory's mode.
pub const DIR_MODE: u32 = 0o700;
/// The mode of every file in the store directory.
pub const FILE_MODE: u32 = 0o600;

/// Permission bits for the group and others.
const GROUP_OTHER: u32 = 0o077;
/// Write permission for others.
const OTHER_WRITE: u32 = 0o002;

fn file_error(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> StoreError {
    let path = path.to_path_buf();
    move |source| StoreError::File {
        action,
        path,
        source,
    }
}

/// Create the store directory (0700), or check and tighten an existing one.
pub fn prepare_dir(dir: &Path) -> Result<(), StoreError> {
    match std::fs::metadata(dir) {
        Ok(meta) => {
            if !meta.is_dir() {
                return Err(StoreError::File {
                    action: "use as the store directory",
                    path: dir.to_path_buf(),
                    source: std::io::Error::new(ErrorKind::NotADirectory, "not a directory"),
                });
            }
            let mode = meta.permissions().mode() & 0o7777;
            if mode & OTHER_WRITE != 0 {
                return Err(StoreError::WorldWritable {
                    path: dir.to_path_buf(),
                    mode,
                });
            }
            tighten(dir, mode, mode & !GROUP_OTHER, "store directory")
        }
        Err(e) if e.kind() == ErrorKind::NotFound => {
            if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::create_dir_all(parent)
                    .map_err(file_error("create the directory", parent))?;
            }
            match DirBuilder::new().mode(DIR_MODE).create(dir) {
                Ok(()) => {}
                // Created meanwhile by someone else: check it as any existing one.
                Err(e) if e.kind() == ErrorKind::AlreadyExists => return prepare_dir(dir),
                Err(e) => return Err(file_error("create the store directory", dir)(e)),
            }
            // The umask may have taken bits away from the owner; set the mode exactly.
            set_mode(dir, DIR_MODE)
        }
        Err(e) => Err(file_error("inspect the store directory", dir)(e)),
    }
}

/// Create the database file 0600 if it does not exist yet, so that SQLite never
/// creates it with the umask's mode.
pub fn create_file(path: &Path) -> Result<(), StoreError> {
    match OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(FILE_MODE)
        .open(path)
    {
        Ok(file) => {
            // As for the directory: the umask may have taken bits away from the owner.
            file.set_permissions(Permissions::from_mode(FILE_MODE))
                .map_err(file_error("set the mode of", path))
        }
        Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(file_error("create the database file", path)(e)),
    }
}

/// Take group and other permissions away from an existing store file; a missing
/// file is fine (SQLite creates it with the database file's mode).
pub fn tighten_file(path: &Path) -> Result<(), StoreError> {
    match std::fs::metadata(path) {
        Ok(meta) => {
            let mode = meta.permissions().mode() & 0o7777;
            tighten(path, mode, mode & !GROUP_OTHER, "store file")
        }
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(file_error("inspect the store file", path)(e)),
    }
}

fn tighten(path: &Path, mode: u32, to: u32, what: &'static str) -> Result<(), StoreError> {
    if mode == to {
        return Ok(());
    }
    set_mode(path, to)?;
    tracing::info!(
        path = %path.display(),
        from = %format!("{mode:04o}"),
        to = %format!("{to:04o}"),
        "{what} was open to group or others; made it private"
    );
    Ok(())
}

fn set_mode(path: &Path, mode: u32) -> Result<(), StoreError> {
    std::fs::set_permissions(path, Permissions::from_mode(mode))
        .map_err(file_error("restrict the permissions of", path))
}
