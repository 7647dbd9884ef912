//! fresh-check's way out: nothing left running or mounted in the root, whatever happened.

use std::path::{Path, PathBuf};
use std::process::Command;

/// On every way out of [`run`]: nothing left running or mounted in the root, and the root
/// removed unless kept.
pub(super) struct Guard {
    pub(super) root: PathBuf,
    pub(super) keep: bool,
}

impl Drop for Guard {
    fn drop(&mut self) {
        end_processes(&self.root);
        let left = unmount_all(&self.root);
        if !left.is_empty() {
            eprintln!("xtask: {} is kept: still mounted under it: {left:?}", self.root.display());
        } else if self.keep {
            eprintln!("xtask: the root is kept: {}", self.root.display());
        } else {
            eprintln!("xtask: removing {}", self.root.display());
            if let Err(e) = std::fs::remove_dir_all(&self.root) {
                eprintln!("xtask: cannot remove {}: {e}", self.root.display());
            }
        }
    }
}

/// SIGKILLs every process whose root is `root`: what a command left running in the chroot.
pub(super) fn end_processes(root: &Path) {
    let me = std::process::id().to_string();
    let pids: Vec<String> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|pid| pid.bytes().all(|b| b.is_ascii_digit()) && *pid != me)
        .filter(|pid| std::fs::read_link(format!("/proc/{pid}/root")).is_ok_and(|r| r == root))
        .collect();
    if !pids.is_empty() {
        eprintln!("xtask: ending {} processes left in the root: {}", pids.len(), pids.join(" "));
        let _ = Command::new("kill").arg("-KILL").args(&pids).status();
    }
}

/// Unmounts (deepest first, lazily when busy) every mount under `root` this namespace sees;
/// what is still mounted after three rounds.
pub(super) fn unmount_all(root: &Path) -> Vec<PathBuf> {
    for _ in 0..3 {
        let mut mounts = mounts_under(root);
        if mounts.is_empty() {
            break;
        }
        mounts.sort_by_key(|m| std::cmp::Reverse(m.components().count()));
        mounts.dedup();
        for m in &mounts {
            let unmounted = Command::new("umount").arg(m).status().is_ok_and(|s| s.success());
            if !unmounted {
                let _ = Command::new("umount").arg("-l").arg(m).status();
            }
        }
    }
    mounts_under(root)
}

/// The mount points at or under `root` (`/proc/self/mountinfo`, fifth field).
fn mounts_under(root: &Path) -> Vec<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    info.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|m| PathBuf::from(unescape(m)))
        .filter(|m| m.starts_with(root))
        .collect()
}

/// A mountinfo field with its octal escapes (space, tab, newline, backslash) undone.
fn unescape(field: &str) -> String {
    field.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes() {
        assert_eq!(unescape("/a\\040b/c\\134040"), "/a b/c\\040");
    }

    #[test]
    fn mounts_under_a_root_only() {
        // `/proc` is mounted here; nothing is under a path that does not exist.
        assert!(mounts_under(Path::new("/")).contains(&PathBuf::from("/proc")));
        assert!(mounts_under(Path::new("/nonexistent/fresh-check")).is_empty());
    }
}
