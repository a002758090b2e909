//! The benchmark harness on tiny counts, against the real binary on SQLite and PostgreSQL, so
//! it never rots: every scenario runs, finds no error, and reports figures that add up. The
//! figures themselves are not judged here (timed assertions flake on shared machines); the full
//! runs are `scripts/bench.sh`, and their numbers are in docs/benchmarks.md.

use std::path::PathBuf;

use agentry_bench::harness::{Database, Target};
use agentry_bench::report;
use agentry_bench::suite::{ClusterSizes, Sizes, run_all, run_cluster};
use serde_json::Value;

fn target(database: Database) -> Target {
    Target {
        agentry: PathBuf::from(env!("CARGO_BIN_EXE_agentry")),
        database,
        workers: 2,
    }
}

async fn smoke(database: Database) {
    let out = tempfile::tempdir().unwrap();
    let sizes = Sizes::smoke();
    let records = run_all(&target(database.clone()), &sizes, out.path())
        .await
        .expect("the suite runs");
    let by_variant = |v: &str| {
        records
            .iter()
            .map(|(r, _)| r)
            .find(|r| r.variant == v)
            .unwrap_or_else(|| panic!("no {v} record"))
    };
    for (record, path) in &records {
        assert_eq!(
            record.errors, 0,
            "{}: {:?}",
            record.variant, record.first_error
        );
        assert_eq!(record.database, database.label());
        // What was written is what was returned.
        let written: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        assert_eq!(written["figures"], record.figures);
        assert_eq!(
            written["machine"]["cores"].as_u64().map(|c| c > 0),
            Some(true)
        );
    }
    let expected_runs = sizes.runs.clients as u64 * sizes.runs.max_runs_per_client;
    for variant in ["runs-0ms", "runs-50ms"] {
        let f = &by_variant(variant).figures;
        assert_eq!(f["runs"].as_u64(), Some(expected_runs), "{variant}: {f}");
        assert_eq!(f["end_to_end"]["count"].as_u64(), Some(expected_runs));
        // One model call for the tool, one for the answer.
        assert_eq!(
            f["model_calls_per_run"].as_f64(),
            Some(2.0),
            "{variant}: {f}"
        );
        let e2e = f["end_to_end"]["p50_ms"].as_f64().unwrap();
        let overhead = f["server_overhead"]["p50_ms"].as_f64().unwrap();
        assert!(overhead > 0.0 && overhead <= e2e, "{variant}: {f}");
        // The bench counts the server's statements and context switches itself: every run
        // writes, and crosses threads.
        let sql = f["sql_statements_per_run"].as_f64().unwrap();
        assert!(sql >= 1.0, "{variant}: {f}");
        let switches = f["context_switches_per_run"].as_f64().unwrap();
        assert!(switches >= 1.0, "{variant}: {f}");
    }
    // The model's 50 ms per call is inside the end-to-end time and outside the overhead.
    let slow = &by_variant("runs-50ms").figures;
    let e2e = slow["end_to_end"]["p50_ms"].as_f64().unwrap();
    let overhead = slow["server_overhead"]["p50_ms"].as_f64().unwrap();
    assert!(e2e - overhead >= 100.0, "two 50 ms model calls: {slow}");

    let stream = &by_variant("stream").figures;
    let runs = (sizes.stream.clients as u64 * sizes.stream.runs_per_client) as usize;
    assert_eq!(stream["runs"].as_u64(), Some(runs as u64), "{stream}");
    assert_eq!(
        stream["first_event_after_model_first_byte"]["count"].as_u64(),
        Some(runs as u64),
        "every run's first byte was matched: {stream}"
    );
    assert!(
        stream["text_events_per_run"].as_f64().unwrap() >= 2.0,
        "{stream}"
    );

    let cancel = &by_variant("cancel").figures;
    let cancels = sizes.cancel.clients as u64 * sizes.cancel.runs_per_client;
    assert_eq!(cancel["cancels"].as_u64(), Some(cancels), "{cancel}");
    let hitl = &by_variant("hitl").figures;
    let approvals = sizes.hitl.clients as u64 * sizes.hitl.runs_per_client;
    assert_eq!(hitl["approvals"].as_u64(), Some(approvals), "{hitl}");

    let idle = &by_variant("idle").figures;
    let sessions = sizes.idle.sessions as u64;
    assert_eq!(idle["sessions_held"].as_u64(), Some(sessions), "{idle}");
    assert_eq!(idle["health_with_sessions_open"].as_u64(), Some(200));
    assert!(idle["server_rss_after_bytes"].as_u64() > Some(0));

    // The same one-tool runs through `/v1/chat/completions` and `/v1/responses`, streamed and
    // not.
    let completions = sizes.openai.clients as u64 * sizes.openai.runs_per_client;
    for variant in ["openai", "openai-stream", "responses", "responses-stream"] {
        let f = &by_variant(variant).figures;
        assert_eq!(f["runs"].as_u64(), Some(completions), "{variant}: {f}");
        assert_eq!(f["end_to_end"]["count"].as_u64(), Some(completions));
        assert!(f["server_cpu_ms_per_run"].as_f64().unwrap() > 0.0, "{f}");
    }

    // The soak: runs in new sessions, memory read at the start, the end and after idle (that
    // eviction bounds the live sessions is tested in tests/api/eviction.rs).
    let soak = &by_variant("soak").figures;
    assert!(soak["runs"].as_u64() > Some(0), "{soak}");
    let marks: Vec<&str> = soak["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["at"].as_str().unwrap())
        .collect();
    assert_eq!(marks, ["start", "end", "after 1 s idle"], "{soak}");
    assert!(soak["live_sessions_after_idle"].is_u64(), "{soak}");
    assert!(soak["bytes_per_run_after_idle"].is_number(), "{soak}");

    // And the records make the table of the benchmarks document.
    let doc = out.path().join("benchmarks.md");
    std::fs::write(&doc, format!("# B\n{}\n{}\n", report::BEGIN, report::END)).unwrap();
    assert_eq!(report::update_doc(&doc, out.path()).unwrap(), 11);
    let text = std::fs::read_to_string(&doc).unwrap();
    for variant in [
        "runs-0ms",
        "runs-50ms",
        "stream",
        "cancel",
        "hitl",
        "idle",
        "openai",
        "openai-stream",
        "responses",
        "responses-stream",
        "soak",
    ] {
        assert!(
            text.contains(&format!("| {variant} | {} |", database.label())),
            "{variant} row in:\n{text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_benchmark_suite_runs_on_sqlite() {
    smoke(Database::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_benchmark_suite_runs_on_postgres() {
    let url = std::env::var("AGENTRY_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/agentry_test".into());
    smoke(Database::parse(&url).unwrap()).await;
}

/// The cluster-mode scenarios (issue 13) on tiny counts: replicas of the real binary on their
/// own PostgreSQL database and the test Redis; every scenario runs without an error and its
/// figures add up (the takeover's trial: a run waiting for an approval, resumed on the other
/// replica after `kill -9` of its owner, asked again and approved there).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_scenarios_run_on_postgres_and_redis() {
    let shared = std::env::var("AGENTRY_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/agentry_test".into());
    let url = crate::own_postgres(&shared, "bench_cluster").await;
    let redis = std::env::var("AGENTRY_TEST_REDIS_URL")
        .unwrap_or_else(|_| "redis://127.0.0.1:6379/0".into());
    let database = Database::parse(&url).unwrap();
    let out = tempfile::tempdir().unwrap();
    let sizes = ClusterSizes::smoke();
    let records = run_cluster(&target(database), &redis, &sizes, out.path())
        .await
        .expect("the cluster scenarios run");
    let by_variant = |v: &str| {
        &records
            .iter()
            .map(|(r, _)| r)
            .find(|r| r.variant == v)
            .unwrap_or_else(|| panic!("no {v} record"))
            .figures
    };
    for (record, _) in &records {
        assert_eq!(
            record.errors, 0,
            "{}: {:?}",
            record.variant, record.first_error
        );
        assert_eq!(record.database, "postgres");
    }

    // Both modes ran the same runs; each run made two model calls and cost CPU.
    let cpu = by_variant("cluster-cpu");
    let runs = sizes.cpu.clients as u64 * sizes.cpu.max_runs_per_client;
    for mode in ["single_node", "cluster"] {
        let phase = &cpu[mode][0];
        assert_eq!(phase["runs"].as_u64(), Some(runs), "{mode}: {cpu}");
        assert_eq!(phase["model_calls_per_run"].as_f64(), Some(2.0), "{cpu}");
        assert!(
            phase["sql_statements_per_run"].as_f64().unwrap() >= 1.0,
            "{cpu}"
        );
    }
    assert!(
        cpu["cpu_ratio_cluster_to_single_node"].as_f64().unwrap() > 0.0,
        "{cpu}"
    );

    let three = by_variant("cluster-runs-3r");
    assert_eq!(
        three["runs"].as_u64(),
        Some(sizes.runs.clients as u64 * sizes.runs.max_runs_per_client),
        "{three}"
    );
    assert_eq!(three["model_calls_per_run"].as_f64(), Some(2.0), "{three}");

    let cancel = by_variant("cluster-cancel");
    let cancels = sizes.cancel.clients as u64 * sizes.cancel.runs_per_client;
    assert_eq!(
        cancel["cancel_to_done"]["count"].as_u64(),
        Some(cancels),
        "{cancel}"
    );
    let hitl = by_variant("cluster-hitl");
    let approvals = sizes.hitl.clients as u64 * sizes.hitl.runs_per_client;
    assert_eq!(
        hitl["decision_to_next_event"]["count"].as_u64(),
        Some(approvals),
        "{hitl}"
    );

    // A takeover cannot be faster than the dead owner's heartbeat key takes to expire after
    // its last renewal (the TTL less one renewal period: 2.25 s at the default 3 s).
    let takeover = by_variant("takeover");
    assert_eq!(
        takeover["trials"].as_u64(),
        Some(sizes.takeover.trials as u64)
    );
    assert_eq!(
        takeover["waiting_for_approval"]["count"].as_u64(),
        Some(1),
        "{takeover}"
    );
    let fastest = takeover["kill_to_resumed_event"]["p50_ms"]
        .as_f64()
        .unwrap();
    assert!(fastest >= 2000.0, "{takeover}");

    let doc = out.path().join("benchmarks.md");
    std::fs::write(&doc, format!("# B\n{}\n{}\n", report::BEGIN, report::END)).unwrap();
    assert_eq!(report::update_doc(&doc, out.path()).unwrap(), 5);
    let text = std::fs::read_to_string(&doc).unwrap();
    for variant in [
        "cluster-cpu",
        "cluster-runs-3r",
        "cluster-cancel",
        "cluster-hitl",
        "takeover",
    ] {
        assert!(
            text.contains(&format!("| {variant} | postgres |")),
            "{variant} row in:\n{text}"
        );
    }
}
