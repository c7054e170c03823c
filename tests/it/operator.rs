//! The operator's tools (issue 18): listeners handed over by systemd socket activation,
//! `slipway backup` / `slipway restore`, `slipway doctor` and `--version`.

mod activation;
pub(crate) mod backup;
mod backup_tree;
mod doctor;
