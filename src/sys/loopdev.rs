//! The loop device ioctls (`linux/loop.h`) and the kernel structs they take: asking
//! `/dev/loop-control` for a free device, attaching a backing file, reading and setting a
//! device's status, detaching it, telling it its backing file grew. The policy (which
//! device, what to do when one is taken) is `disk::loopdev`'s.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

const LOOP_CTL_GET_FREE: libc::c_ulong = 0x4C82;
const LOOP_CONFIGURE: libc::c_ulong = 0x4C0A;
const LOOP_SET_FD: libc::c_ulong = 0x4C00;
const LOOP_SET_STATUS64: libc::c_ulong = 0x4C04;
const LOOP_GET_STATUS64: libc::c_ulong = 0x4C05;
const LOOP_CLR_FD: libc::c_ulong = 0x4C01;
const LOOP_SET_CAPACITY: libc::c_ulong = 0x4C07;

/// `LO_FLAGS_AUTOCLEAR`: the device is let go when its last user (the mount) closes it.
pub const LO_FLAGS_AUTOCLEAR: u32 = 4;

/// `struct loop_info64` (linux/loop.h).
#[repr(C)]
pub struct LoopInfo64 {
    pub device: u64,
    pub inode: u64,
    pub rdevice: u64,
    pub offset: u64,
    pub size_limit: u64,
    pub number: u32,
    pub encrypt_type: u32,
    pub encrypt_key_size: u32,
    pub flags: u32,
    pub file_name: [u8; 64],
    pub crypt_name: [u8; 64],
    pub encrypt_key: [u8; 32],
    pub init: [u64; 2],
}

impl LoopInfo64 {
    pub fn zeroed() -> LoopInfo64 {
        LoopInfo64 {
            device: 0,
            inode: 0,
            rdevice: 0,
            offset: 0,
            size_limit: 0,
            number: 0,
            encrypt_type: 0,
            encrypt_key_size: 0,
            flags: 0,
            file_name: [0; 64],
            crypt_name: [0; 64],
            encrypt_key: [0; 32],
            init: [0; 2],
        }
    }
}

/// `struct loop_config` (linux/loop.h, `LOOP_CONFIGURE` since Linux 5.8).
#[repr(C)]
pub struct LoopConfig {
    /// The backing file's descriptor.
    pub fd: u32,
    pub block_size: u32,
    pub info: LoopInfo64,
    pub reserved: [u64; 8],
}

/// `LOOP_CTL_GET_FREE` on `/dev/loop-control`: the index of a free loop device (made if
/// needed).
pub fn get_free(control: BorrowedFd<'_>) -> io::Result<u32> {
    // SAFETY: LOOP_CTL_GET_FREE takes no argument and returns an index or -1.
    let index = unsafe { libc::ioctl(control.as_raw_fd(), LOOP_CTL_GET_FREE) };
    if index < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(index as u32)
}

/// `LOOP_GET_STATUS64`: what `device` is attached to.
pub fn get_status(device: BorrowedFd<'_>) -> io::Result<LoopInfo64> {
    let mut info = LoopInfo64::zeroed();
    // SAFETY: LOOP_GET_STATUS64 writes one `struct loop_info64` into `info`.
    if unsafe { libc::ioctl(device.as_raw_fd(), LOOP_GET_STATUS64, &mut info) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(info)
}

/// `LOOP_CONFIGURE`: attaches `config.fd` to `device` with `config.info` in one step
/// (`EINVAL` or `ENOTTY` before Linux 5.8).
pub fn configure(device: BorrowedFd<'_>, config: &LoopConfig) -> io::Result<()> {
    // SAFETY: LOOP_CONFIGURE reads one `struct loop_config`, which `config` is.
    if unsafe { libc::ioctl(device.as_raw_fd(), LOOP_CONFIGURE, config) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `LOOP_SET_FD`: attaches `backing` to `device`.
pub fn set_fd(device: BorrowedFd<'_>, backing: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: LOOP_SET_FD takes the backing file's descriptor.
    if unsafe { libc::ioctl(device.as_raw_fd(), LOOP_SET_FD, backing.as_raw_fd()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `LOOP_SET_STATUS64`: sets `info` (flags, name) on an attached `device`.
pub fn set_status(device: BorrowedFd<'_>, info: &LoopInfo64) -> io::Result<()> {
    // SAFETY: LOOP_SET_STATUS64 reads one `struct loop_info64`.
    if unsafe { libc::ioctl(device.as_raw_fd(), LOOP_SET_STATUS64, info) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `LOOP_CLR_FD`: detaches `device` from its backing file.
pub fn clear_fd(device: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: LOOP_CLR_FD takes no argument.
    if unsafe { libc::ioctl(device.as_raw_fd(), LOOP_CLR_FD, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `LOOP_SET_CAPACITY`: `device` reads its backing file's size again (after it grew).
pub fn set_capacity(device: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: LOOP_SET_CAPACITY takes no argument.
    if unsafe { libc::ioctl(device.as_raw_fd(), LOOP_SET_CAPACITY, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_structs_have_the_kernels_sizes() {
        assert_eq!(std::mem::size_of::<LoopInfo64>(), 232);
        assert_eq!(std::mem::size_of::<LoopConfig>(), 304);
    }
}
