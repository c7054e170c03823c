//! The one module that may write `unsafe`: every system call the rest of the crate cannot
//! reach through a safe API of `std`, `nix` or `tokio`, each behind a safe, narrowly typed
//! function with its `// SAFETY:` reasoning.
//!
//! It is the bottom layer: it imports no other module of the crate. A call that `nix` already
//! offers safely does not belong here; callers use `nix` directly.
//!
//! - `loopdev.rs` — the loop device ioctls and their kernel structs.
//! - `heap.rs` — `mallopt`.

#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub mod heap;
pub mod loopdev;
