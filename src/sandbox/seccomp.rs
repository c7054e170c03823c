//! The seccomp filters every sandboxed process runs under, compiled with seccompiler by the
//! helper ([`super::exec`]) before it clones the sandbox and installed by the sandbox init
//! just before it starts the command.
//!
//! A deny-list: everything is allowed except mounting, entering or creating namespaces,
//! ptrace, bpf, the kernel keyring and module loading (EPERM). `clone3` answers ENOSYS, so
//! libc falls back to `clone`, whose flags the filter can inspect.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// Syscalls refused outright.
const DENIED: &[libc::c_long] = &[
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_open_tree,
    libc::SYS_move_mount,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_mount_setattr,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_bpf,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_userfaultfd,
    libc::SYS_perf_event_open,
    libc::SYS_open_by_handle_at,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_reboot,
    libc::SYS_acct,
];

/// `clone` flags that create namespaces.
const CLONE_NEW_FLAGS: &[libc::c_int] = &[
    libc::CLONE_NEWNS,
    libc::CLONE_NEWCGROUP,
    libc::CLONE_NEWUTS,
    libc::CLONE_NEWIPC,
    libc::CLONE_NEWUSER,
    libc::CLONE_NEWPID,
    libc::CLONE_NEWNET,
];

#[cfg(target_arch = "x86_64")]
const ARCH: TargetArch = TargetArch::x86_64;
#[cfg(target_arch = "aarch64")]
const ARCH: TargetArch = TargetArch::aarch64;
#[cfg(target_arch = "riscv64")]
const ARCH: TargetArch = TargetArch::riscv64;

/// The x32 ABI shares the x86_64 audit arch but numbers its syscalls with this bit set.
#[cfg(target_arch = "x86_64")]
const X32_BIT: libc::c_long = 0x4000_0000;

/// Both filters, in the order they are installed.
pub struct Filters {
    pub deny: BpfProgram,
    pub clone3: BpfProgram,
}

pub fn compile() -> Result<Filters, seccompiler::BackendError> {
    let mut denied: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for &syscall in DENIED {
        for number in abi_numbers(syscall) {
            denied.insert(number, Vec::new());
        }
    }
    let mut clone_rules = Vec::new();
    for &flag in CLONE_NEW_FLAGS {
        let flag = flag as u64;
        let condition = SeccompCondition::new(
            0,
            SeccompCmpArgLen::Qword,
            SeccompCmpOp::MaskedEq(flag),
            flag,
        )?;
        clone_rules.push(SeccompRule::new(vec![condition])?);
    }
    for number in abi_numbers(libc::SYS_clone) {
        denied.insert(number, clone_rules.clone());
    }
    let deny = SeccompFilter::new(
        denied,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        ARCH,
    )?;

    let mut clone3: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for number in abi_numbers(libc::SYS_clone3) {
        clone3.insert(number, Vec::new());
    }
    let clone3 = SeccompFilter::new(
        clone3,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        ARCH,
    )?;
    Ok(Filters {
        deny: deny.try_into()?,
        clone3: clone3.try_into()?,
    })
}

/// Installs both filters on the calling thread (no_new_privs must already be set).
pub fn install(filters: &Filters) -> Result<(), seccompiler::Error> {
    seccompiler::apply_filter(&filters.deny)?;
    seccompiler::apply_filter(&filters.clone3)
}

/// Every number a syscall has on this architecture (`c_long` is `i64` on every target
/// seccompiler supports).
fn abi_numbers(syscall: libc::c_long) -> Vec<i64> {
    #[cfg(target_arch = "x86_64")]
    return vec![syscall, syscall | X32_BIT];
    #[cfg(not(target_arch = "x86_64"))]
    return vec![syscall];
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_filters_compile() {
        let filters = super::compile().unwrap();
        assert!(!filters.deny.is_empty());
        assert!(!filters.clone3.is_empty());
    }
}
