//! Reads a list of rules as JSON and reports which of them match a line: enough to compile and
//! link every crate the bench's cargo-real workload builds.
use regex::Regex;
use serde::{Deserialize, Serialize};

#[derive(Debug, Deserialize, Serialize)]
struct Rule {
    name: String,
    pattern: String,
}

fn main() {
    let rules: Vec<Rule> = serde_json::from_str(
        r#"[{"name": "number", "pattern": "[0-9]+"}, {"name": "word", "pattern": "[a-z]+"}]"#,
    )
    .expect("the rules are valid JSON");
    let line = std::env::args().nth(1).unwrap_or_else(|| "abc 123".to_string());
    for rule in &rules {
        let re = Regex::new(&rule.pattern).expect("the patterns are valid");
        let found: Vec<&str> = re.find_iter(&line).map(|m| m.as_str()).collect();
        println!("{}", serde_json::json!({ "rule": rule, "found": found }));
    }
}
