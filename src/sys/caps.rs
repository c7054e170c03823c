//! Capabilities: emptying every set of the calling thread and locking the securebits, for a
//! process that must never regain privileges (the sandbox init).

use std::io;

/// Clears the ambient set, locks the securebits (no root magic, no ambient raise, no
/// setuid fix-up, keep-caps off), drops the whole bounding set and empties the effective,
/// permitted and inheritable sets. Each failure names the step.
pub fn drop_all() -> io::Result<()> {
    let check = |result: libc::c_int, what: &str| {
        if result < 0 {
            let error = io::Error::last_os_error();
            return Err(io::Error::new(error.kind(), format!("{what}: {error}")));
        }
        Ok(())
    };
    // SAFETY: prctl/capset calls that only change this thread's credentials; capset reads
    // one header and two data structs of the layout the kernel's version 3 expects.
    unsafe {
        check(
            libc::prctl(
                libc::PR_CAP_AMBIENT,
                libc::PR_CAP_AMBIENT_CLEAR_ALL,
                0,
                0,
                0,
            ),
            "clear ambient capabilities",
        )?;
        let secure = libc::SECBIT_NOROOT
            | libc::SECBIT_NOROOT_LOCKED
            | libc::SECBIT_NO_SETUID_FIXUP
            | libc::SECBIT_NO_SETUID_FIXUP_LOCKED
            | libc::SECBIT_KEEP_CAPS_LOCKED
            | libc::SECBIT_NO_CAP_AMBIENT_RAISE
            | libc::SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
        check(
            libc::prctl(libc::PR_SET_SECUREBITS, secure as libc::c_ulong, 0, 0, 0),
            "lock securebits",
        )?;
        for capability in 0..64 {
            if libc::prctl(libc::PR_CAPBSET_DROP, capability, 0, 0, 0) < 0 {
                if io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
                    break;
                }
                check(-1, "drop the bounding set")?;
            }
        }
        let mut header = CapHeader {
            version: LINUX_CAPABILITY_VERSION_3,
            pid: 0,
        };
        let data = [CapData::default(); 2];
        check(
            libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) as libc::c_int,
            "clear capabilities",
        )?;
    }
    Ok(())
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}
