//! Signal dispositions that `nix` offers only as `unsafe` functions.

use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};

/// Gives `signal` a handler that does nothing. A pid namespace's init needs one: the kernel
/// drops a signal the init has no handler for, even one it keeps blocked to collect.
pub fn install_noop_handler(signal: Signal) -> nix::Result<()> {
    let handler = SigAction::new(SigHandler::Handler(noop), SaFlags::empty(), SigSet::empty());
    // SAFETY: the handler does nothing, so it is async-signal-safe.
    unsafe { sigaction(signal, &handler) }.map(drop)
}

extern "C" fn noop(_: libc::c_int) {}

/// Gives the signal numbered `number` its default action again (`signal(number, SIG_DFL)`);
/// a number that is no signal is left alone.
pub fn restore_default(number: libc::c_int) {
    // SAFETY: SIG_DFL installs no code of ours; an invalid number fails with EINVAL.
    unsafe { libc::signal(number, libc::SIG_DFL) };
}
