//! The one integration test binary. Every test mounts for real (see `support::Mounted`).

mod support;

mod agent;
mod capture;
mod carry;
mod container;
mod containment;
mod faults;
mod fork;
mod fuzz;
mod hook;
mod hostile;
mod lifecycle;
mod log;
mod mcp;
mod memory;
mod messages;
mod model;
mod nonroot;
mod passthrough;
mod posix;
mod privacy;
mod protocol;
mod remote;
mod requests;
mod retention;
mod rewind;
mod sdk_rewind;
mod sdk_scenarios;
mod sessions;
mod timeouts;
mod transport;
mod travel;
mod ui;
mod undo;
mod unprotected;
mod watchers;
mod workloads;

/// Every file in tests/all is a module of this binary (a forgotten file would never run).
#[test]
fn every_test_file_is_compiled_in() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/all");
    let this = std::fs::read_to_string(dir.join("main.rs")).unwrap();
    for e in std::fs::read_dir(&dir).unwrap() {
        let name = e.unwrap().file_name().into_string().unwrap();
        if let Some(stem) = name.strip_suffix(".rs") {
            if stem != "main" {
                assert!(
                    this.contains(&format!("mod {stem};")),
                    "tests/all/{name} is not a module of main.rs"
                );
            }
        }
    }
}
