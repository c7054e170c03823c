fn main() {
    // The sandbox helper must run before anything can start a thread.
    if std::env::args_os()
        .nth(1)
        .is_some_and(|arg| arg == "sandbox-exec")
    {
        slipway::sandbox::sandbox_exec_main()
    }
}
