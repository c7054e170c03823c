//! The seccomp filters every sandboxed process runs under, compiled with seccompiler by the
//! helper ([`super::exec`]) before it clones the sandbox and installed by the sandbox init
//! just before it starts the command.
//!
//! A deny-list: everything is allowed except mounting, entering or creating namespaces,
//! ptrace, bpf, the kernel keyring, module loading, io_uring (its operations bypass this
//! filter), file handles, `kcmp`, fanotify, changing the personality, vsock sockets and the
//! terminal-injection ioctls (EPERM). `clone3` answers ENOSYS, so libc falls back to `clone`,
//! whose flags the filter can inspect. On x86_64 the x32 ABI kills the process: its syscall
//! numbers are a second table the deny-list would have to mirror.

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
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_name_to_handle_at,
    libc::SYS_kcmp,
    libc::SYS_fanotify_init,
];

/// `ioctl` requests refused: typing into a terminal (TIOCSTI), the console's TIOCLINUX, and
/// changing a terminal's line discipline.
const DENIED_IOCTLS: &[u64] = &[0x5412, 0x541C, 0x5423];

/// `socket` families refused: vsock reaches the hypervisor.
const DENIED_SOCKET_FAMILIES: &[u64] = &[libc::AF_VSOCK as u64];

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

/// The filters, in the order they are installed.
pub struct Filters {
    pub deny: BpfProgram,
    pub clone3: BpfProgram,
    /// x86_64: any syscall number with the x32 bit kills the process.
    pub no_x32: Option<BpfProgram>,
}

/// A raw filter: syscall numbers at or above `X32_BIT` kill the process, all else passes to
/// the other filters (which check the architecture).
#[cfg(target_arch = "x86_64")]
fn no_x32() -> BpfProgram {
    use seccompiler::sock_filter;
    const LOAD_NR: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS, offset 0: seccomp_data.nr
    const JGE: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
    const RET: u16 = 0x06; // BPF_RET | BPF_K
    vec![
        sock_filter {
            code: LOAD_NR,
            jt: 0,
            jf: 0,
            k: 0,
        },
        sock_filter {
            code: JGE,
            jt: 0,
            jf: 1,
            k: X32_BIT as u32,
        },
        sock_filter {
            code: RET,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_KILL_PROCESS,
        },
        sock_filter {
            code: RET,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ALLOW,
        },
    ]
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
    let equal = |arg: u8, value: u64| -> Result<SeccompRule, seccompiler::BackendError> {
        let condition =
            SeccompCondition::new(arg, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, value)?;
        SeccompRule::new(vec![condition])
    };
    let ioctl_rules = DENIED_IOCTLS
        .iter()
        .map(|&request| equal(1, request))
        .collect::<Result<Vec<_>, _>>()?;
    for number in abi_numbers(libc::SYS_ioctl) {
        denied.insert(number, ioctl_rules.clone());
    }
    let socket_rules = DENIED_SOCKET_FAMILIES
        .iter()
        .map(|&family| equal(0, family))
        .collect::<Result<Vec<_>, _>>()?;
    for number in abi_numbers(libc::SYS_socket) {
        denied.insert(number, socket_rules.clone());
    }
    // personality(0) and the query personality(0xffffffff) only.
    let personality = SeccompRule::new(vec![
        SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, 0)?,
        SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, 0xffff_ffff)?,
    ])?;
    for number in abi_numbers(libc::SYS_personality) {
        denied.insert(number, vec![personality.clone()]);
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
    #[cfg(target_arch = "x86_64")]
    let no_x32 = Some(no_x32());
    #[cfg(not(target_arch = "x86_64"))]
    let no_x32 = None;
    Ok(Filters {
        deny: deny.try_into()?,
        clone3: clone3.try_into()?,
        no_x32,
    })
}

/// Installs both filters on the calling thread (no_new_privs must already be set).
pub fn install(filters: &Filters) -> Result<(), seccompiler::Error> {
    seccompiler::apply_filter(&filters.deny)?;
    seccompiler::apply_filter(&filters.clone3)?;
    if let Some(no_x32) = &filters.no_x32 {
        seccompiler::apply_filter(no_x32)?;
    }
    Ok(())
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
