//! `slipway doctor` on this machine: a name that resolves nowhere blocks (exit 1, the FAIL
//! line says what to add); a dev-like config passes; `--version` prints the crate version.

use std::process::Command;

use crate::support::BIN;

fn doctor(config: &str) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("slipway.toml");
    let config = config.replace("DATA", &dir.path().join("data").display().to_string());
    std::fs::write(&path, config).unwrap();
    let output = Command::new(BIN)
        .args(["doctor", "--config", path.to_str().unwrap()])
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.code(), said)
}

#[test]
fn doctor_fails_on_names_that_do_not_resolve_and_passes_a_working_setup() {
    let (code, said) = doctor(
        "data_dir = \"DATA\"\napps_domain = \"apps.doctor-test.invalid\"\n\
         http_listen = \"127.0.0.1:0\"\n[tls]\nmode = \"off\"\n[sandbox]\nmode = \"none\"\n",
    );
    assert_eq!(code, Some(1), "{said}");
    assert!(
        said.contains("FAIL  dns           doctor-check.apps.doctor-test.invalid does not resolve")
            && said.contains("wildcard DNS record"),
        "{said}"
    );
    assert!(
        said.contains("slipway.apps.doctor-test.invalid does not resolve"),
        "{said}"
    );
    assert!(said.contains("WARN  sandbox"), "{said}");

    let (code, said) = doctor(
        "data_dir = \"DATA\"\napps_domain = \"localhost\"\ncontrol_host = \"slipway.example.localhost\"\n\
         http_listen = \"127.0.0.1:0\"\n[tls]\nmode = \"off\"\n[sandbox]\nmode = \"none\"\n",
    );
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("ok    disk"), "{said}");
    assert!(
        said.contains("ok    ports         http_listen 127.0.0.1:0 is free"),
        "{said}"
    );
}

#[test]
fn doctor_reports_a_port_held_by_another_program() {
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = held.local_addr().unwrap().port();
    let (code, said) = doctor(&format!(
        "data_dir = \"DATA\"\napps_domain = \"localhost\"\n\
         http_listen = \"127.0.0.1:{port}\"\n[tls]\nmode = \"off\"\n[sandbox]\nmode = \"none\"\n"
    ));
    assert_eq!(code, Some(1), "{said}");
    assert!(
        said.contains(&format!(
            "FAIL  ports         http_listen 127.0.0.1:{port} cannot be bound"
        )),
        "{said}"
    );
}

#[test]
fn version_prints_the_crate_version() {
    let output = Command::new(BIN).arg("--version").output().unwrap();
    assert!(output.status.success());
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        format!("slipway {}", env!("CARGO_PKG_VERSION"))
    );
}
