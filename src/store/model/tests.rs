//! Tests of `model`.

use super::*;

/// Paths in a plan: UTF-8 as a string, anything else as bytes, both read back exactly.
#[test]
fn a_plans_paths_round_trip_whatever_their_bytes() {
    for path in [&b"src/a.rs"[..], b"bad\xff/name"] {
        let t = PlanTarget {
            path: crate::wspath::ws(path),
            kind: Kind::Absent,
            blob: None,
            mode: 0,
            uid: 0,
            gid: 0,
            target: None,
            rdev: 0,
            apply: Apply::Replace,
            xattrs: None,
        };
        let json = serde_json::to_string(std::slice::from_ref(&t)).unwrap();
        assert_eq!(
            PlanTarget::parse_plan(&json).unwrap(),
            (vec![t], vec![]),
            "{json}"
        );
    }
}

/// A journalled target whose path names no place inside the workspace (the journal was
/// altered: rewindfs checks each before it journals a plan) is set apart, not read as a
/// target; the others are read.
#[test]
fn a_plan_target_outside_the_workspace_is_set_apart() {
    let plan = r#"[{"path":".","kind":"absent","blob":null,"mode":0,"uid":0,"gid":0,"target":null,"rdev":0},
                   {"path":"../x","kind":"absent","blob":null,"mode":0,"uid":0,"gid":0,"target":null,"rdev":0},
                   {"path":"ok","kind":"absent","blob":null,"mode":0,"uid":0,"gid":0,"target":null,"rdev":0}]"#;
    let (targets, bad) = PlanTarget::parse_plan(plan).unwrap();
    assert_eq!(bad, vec![b".".to_vec(), b"../x".to_vec()]);
    assert_eq!(targets.len(), 1);
    assert_eq!(targets[0].path, crate::wspath::ws("ok"));
    // Read any other way, such a path is refused.
    assert!(serde_json::from_str::<Vec<PlanTarget>>(plan).is_err());
}

/// A plan journalled before `apply` existed (as a crash may leave one for a newer build to
/// finish) reads as `replace`, the way it was applied; `replace` is left out of new plans,
/// so their JSON is what it was, and `in_place` round-trips.
#[test]
fn plans_without_apply_read_as_replace_and_in_place_round_trips() {
    let old = r#"[{"path":[97],"kind":"file","blob":"ab","mode":33188,"uid":0,"gid":0,"target":null,"rdev":0}]"#;
    let plan = PlanTarget::parse_plan(old).unwrap().0;
    assert_eq!(plan[0].apply, Apply::Replace);
    assert_eq!(plan[0].kind, Kind::File);
    // Written again, the path is a string (smaller) and nothing else changes.
    assert_eq!(
        serde_json::to_string(&plan).unwrap(),
        old.replace("[97]", "\"a\"")
    );
    let mut t = plan[0].clone();
    t.apply = Apply::InPlace;
    let json = serde_json::to_string(&[t.clone()]).unwrap();
    assert!(json.contains(r#""apply":"in_place""#), "{json}");
    assert_eq!(PlanTarget::parse_plan(&json).unwrap().0, vec![t]);
}

/// Extended attributes, binary values and names included, round trip through their stored
/// form and through a plan; a plan journalled before they existed reads as "leave them".
#[test]
fn extended_attributes_round_trip_stored_and_in_a_plan() {
    let x = Xattrs::new(vec![
        (b"user.z".to_vec(), b"last".to_vec()),
        (b"user.a".to_vec(), Vec::new()),
        (b"user.bin".to_vec(), vec![0, 0xff, 7]),
        (b"trusted.\xfe".to_vec(), b"v".to_vec()),
    ]);
    assert_eq!(x.iter().next().unwrap().0, b"trusted.\xfe");
    assert_eq!(x.get(b"user.bin"), Some(&[0, 0xff, 7][..]));
    assert_eq!(Xattrs::decode(&x.encode()), Some(x.clone()));
    assert_eq!(
        Xattrs::decode(&Xattrs::default().encode()),
        Some(Xattrs::default())
    );
    assert_eq!(Xattrs::decode(&x.encode()[..5]), None);
    let t = PlanTarget {
        path: crate::wspath::ws("d"),
        kind: Kind::Dir,
        blob: None,
        mode: 0o40755,
        uid: 0,
        gid: 0,
        target: None,
        rdev: 0,
        xattrs: Some(x),
        apply: Apply::Replace,
    };
    let json = serde_json::to_string(std::slice::from_ref(&t)).unwrap();
    assert_eq!(PlanTarget::parse_plan(&json).unwrap().0, vec![t], "{json}");
    let old = r#"[{"path":"d","kind":"dir","blob":null,"mode":16877,"uid":0,"gid":0,"target":null,"rdev":0}]"#;
    assert_eq!(PlanTarget::parse_plan(old).unwrap().0[0].xattrs, None);
}
