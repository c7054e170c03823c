//! The one module that may write `unsafe`: every system call the rest of the crate cannot
//! reach through a safe API of `std`, `nix` or `tokio`, each behind a safe, narrowly typed
//! function with its `// SAFETY:` reasoning. Where an operation cannot be made safe in
//! general (`clone`, `fork`, hooks that run between `fork` and `exec`), the function does one
//! fixed job and says what its caller must guarantee (a single-threaded process).
//!
//! It is the bottom layer: it imports no other module of the crate. A call that `nix` already
//! offers safely does not belong here; callers use `nix` directly.
//!
//! - `fd.rs` — claiming inherited descriptors by number; pidfds and pipes for the runtime.
//! - `process.rs` — `clone` into namespaces, `fork` + `exec` in a group of its own, a
//!   detached `fork` (the cluster task's reporter), `_exit`, pidfds, the descriptor and namespace set-up between `fork` and `exec`.
//! - `pty.rs` — pseudo-terminal pairs, window sizes, a controlling terminal at `exec`.
//! - `signal.rs` — signal dispositions (`sigaction`, `signal`).
//! - `caps.rs` — emptying the capability sets and locking the securebits.
//! - `mount.rs` — detached mount trees (`open_tree`, `mount_setattr`, `move_mount`).
//! - `loopdev.rs` — the loop device ioctls and their kernel structs.
//! - `heap.rs` — `mallopt`.

pub mod caps;
pub mod fd;
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub mod heap;
pub mod loopdev;
pub mod mount;
pub mod process;
pub mod pty;
pub mod signal;
