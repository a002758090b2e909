//! Cluster-mode quotas against a real Redis (`AGENTRY_TEST_REDIS_URL`, default
//! `redis://127.0.0.1:6379/10`): several "replicas" (each its own `RedisQuota` over its own
//! connection, as separate processes would have) race for the same tenant's limits, and none
//! is ever over-admitted. Each test uses a key prefix of its own and deletes its keys after.

use std::time::{Duration, Instant};

use agentry_actors::quota::{QuotaError, QuotaHandle, RedisQuota};
use agentry_schema::ids::{RunId, TenantId, UserId};
use agentry_store::tenants::Quotas;
use futures::future::join_all;
use redis::aio::ConnectionManager;

const REPLICAS: usize = 4;
const ATTEMPTS: usize = 100;

fn redis_url() -> String {
    std::env::var("AGENTRY_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/10".into())
}

async fn connection(url: &str) -> ConnectionManager {
    let client = redis::Client::open(url).expect("a Redis URL");
    client
        .get_connection_manager()
        .await
        .unwrap_or_else(|e| panic!("Redis at {url} (start it, or set AGENTRY_TEST_REDIS_URL): {e}"))
}

/// A prefix of the test's own; its keys are removed when it is dropped.
struct Prefix(String);

impl Prefix {
    fn new(test: &str) -> Self {
        Prefix(format!("agentry-test:{test}:{}:", uuid::Uuid::new_v4()))
    }
}

impl Drop for Prefix {
    fn drop(&mut self) {
        if let Ok(client) = redis::Client::open(redis_url())
            && let Ok(mut conn) = client.get_connection()
        {
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg(format!("{}*", self.0))
                .query(&mut conn)
                .unwrap_or_default();
            if !keys.is_empty() {
                let _: Result<i64, _> = redis::cmd("DEL").arg(keys).query(&mut conn);
            }
        }
    }
}

fn quotas(rpm: u32, runs: u32, sessions: u32, tokens: u64) -> Quotas {
    Quotas {
        requests_per_minute: rpm,
        max_concurrent_runs: runs,
        max_sessions_per_user: sessions,
        tokens_per_day: tokens,
        ..Quotas::default()
    }
}

/// `REPLICAS` handles on the same tenant, each over its own connection.
async fn replicas(
    prefix: &Prefix,
    tenant: TenantId,
    q: Quotas,
    lease: Duration,
) -> Vec<QuotaHandle> {
    let mut out = Vec::new();
    for _ in 0..REPLICAS {
        let conn = connection(&redis_url()).await;
        out.push(QuotaHandle::new(RedisQuota::new(
            conn, &prefix.0, tenant, q, 0, lease,
        )));
    }
    out
}

fn refused_as(e: &QuotaError, quota: &str) -> bool {
    matches!(e, QuotaError::Refused(r) if r.quota == quota)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_acquisitions_over_replicas_never_over_admit() {
    let prefix = Prefix::new("admit");
    let tenant = TenantId::new();
    let (rpm, runs, sessions) = (25, 10, 7);
    let hs = replicas(
        &prefix,
        tenant,
        quotas(rpm, runs, sessions, 0),
        Duration::from_secs(30),
    )
    .await;

    // requests_per_minute: 100 requests at once over four replicas → exactly 25.
    let results = join_all((0..ATTEMPTS).map(|i| {
        let h = hs[i % REPLICAS].clone();
        tokio::spawn(async move { h.admit_request().await })
    }))
    .await;
    let results: Vec<_> = results.into_iter().map(|r| r.unwrap()).collect();
    let admitted = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(
        admitted, rpm as usize,
        "requests_per_minute admitted {admitted}"
    );
    for r in results.iter().filter_map(|r| r.as_ref().err()) {
        assert!(refused_as(r, "requests_per_minute"), "{r:?}");
        if let QuotaError::Refused(r) = r {
            assert!(
                (1..=60).contains(&r.retry_after.as_secs()),
                "Retry-After {:?}",
                r.retry_after
            );
        }
    }

    // max_concurrent_runs: 100 runs at once → exactly 10 slots.
    let ids: Vec<RunId> = (0..ATTEMPTS).map(|_| RunId::new()).collect();
    let results = join_all(ids.iter().enumerate().map(|(i, id)| {
        let (h, id) = (hs[i % REPLICAS].clone(), *id);
        tokio::spawn(async move { (id, i, h.acquire_run(id).await) })
    }))
    .await;
    let held: Vec<(RunId, usize)> = results
        .into_iter()
        .map(|r| r.unwrap())
        .filter_map(|(id, i, r)| match r {
            Ok(()) => Some((id, i)),
            Err(e) => {
                assert!(refused_as(&e, "max_concurrent_runs"), "{e:?}");
                None
            }
        })
        .collect();
    assert_eq!(held.len(), runs as usize, "run slots admitted");
    // A released slot is taken again by another replica, and only one.
    let (id, i) = held[0];
    hs[i % REPLICAS].release_run(id);
    let mut took = None;
    for _ in 0..100 {
        let results = join_all((0..REPLICAS).map(|k| {
            let h = hs[k].clone();
            async move { h.acquire_run(RunId::new()).await.is_ok() }
        }))
        .await;
        let n = results.iter().filter(|ok| **ok).count();
        assert!(n <= 1, "one freed slot admitted {n} runs");
        if n == 1 {
            took = Some(n);
            break;
        }
        // The release is sent in the background.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(took, Some(1), "the released slot was never taken again");

    // max_sessions_per_user: the user has 2 stored; 100 new ones at once → exactly 5 more.
    let user = UserId::new();
    let results = join_all((0..ATTEMPTS).map(|i| {
        let h = hs[i % REPLICAS].clone();
        tokio::spawn(async move { h.reserve_session(user, Some(2)).await })
    }))
    .await;
    let admitted = results
        .into_iter()
        .filter(|r| r.as_ref().unwrap().is_ok())
        .count();
    assert_eq!(admitted, sessions as usize - 2, "sessions admitted");
    // Another user has their own count.
    hs[0].reserve_session(UserId::new(), Some(0)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn parallel_model_calls_overshoot_the_daily_budget_by_at_most_one_reservation() {
    let prefix = Prefix::new("tokens");
    let tenant = TenantId::new();
    let budget = 10_000;
    let estimate = 700;
    // The database counted 1,000 tokens today before this replica started.
    let mut hs = Vec::new();
    for _ in 0..REPLICAS {
        hs.push(QuotaHandle::new(RedisQuota::new(
            connection(&redis_url()).await,
            &prefix.0,
            tenant,
            quotas(0, 0, 0, budget),
            1_000,
            Duration::from_secs(30),
        )));
    }
    // 100 calls from four replicas, each reserving 700 and using 0–700 of it; calls keep
    // coming until the budget refuses them.
    let tasks = (0..ATTEMPTS).map(|i| {
        let h = hs[i % REPLICAS].clone();
        tokio::spawn(async move {
            let mut used = 0u64;
            let mut n = i as u64;
            loop {
                match h.reserve_tokens(estimate).await {
                    Ok(r) => {
                        n = n.wrapping_mul(6364136223846793005).wrapping_add(1);
                        let spent = (n >> 33) % (estimate + 1);
                        tokio::time::sleep(Duration::from_millis(n % 7)).await;
                        r.settle(spent);
                        used += spent;
                    }
                    Err(e) => {
                        assert!(refused_as(&e, "tokens_per_day"), "{e:?}");
                        return used;
                    }
                }
            }
        })
    });
    let used: u64 = join_all(tasks).await.into_iter().map(|r| r.unwrap()).sum();
    let total = 1_000 + used;
    assert!(total >= budget - estimate, "the budget was used: {total}");
    assert!(
        total < budget + estimate,
        "{total} tokens against a budget of {budget}: more than one reservation over"
    );
    // A call stops at a refusal made while others held reservations they then did not use all
    // of: the budget may not be quite spent. Settled, the counts are exact either way.
    for h in &hs {
        let r = h.acquire_run(RunId::new()).await;
        if total >= budget {
            assert!(
                refused_as(r.as_ref().unwrap_err(), "tokens_per_day"),
                "{r:?}"
            );
        } else {
            assert!(
                r.is_ok(),
                "{total} of {budget} used, the rest is there: {r:?}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_replicas_run_slots_come_back_after_the_lease() {
    let prefix = Prefix::new("lease");
    let tenant = TenantId::new();
    let lease = Duration::from_millis(1500);
    let q = quotas(0, 2, 0, 0);
    let survivor = QuotaHandle::new(RedisQuota::new(
        connection(&redis_url()).await,
        &prefix.0,
        tenant,
        q,
        0,
        lease,
    ));
    {
        // A replica takes both slots, then dies: no release, no renewal.
        let doomed = QuotaHandle::new(RedisQuota::new(
            connection(&redis_url()).await,
            &prefix.0,
            tenant,
            q,
            0,
            lease,
        ));
        doomed.acquire_run(RunId::new()).await.unwrap();
        doomed.acquire_run(RunId::new()).await.unwrap();
        // Dropped without releasing: its renewal task ends with it, as a killed process's would.
        drop(doomed);
    }
    // A live replica's runs are renewed past their lease; the dead one's are not.
    let e = survivor.acquire_run(RunId::new()).await.unwrap_err();
    assert!(refused_as(&e, "max_concurrent_runs"), "{e:?}");
    let died = Instant::now();
    loop {
        match survivor.acquire_run(RunId::new()).await {
            Ok(()) => break,
            Err(e) => assert!(refused_as(&e, "max_concurrent_runs"), "{e:?}"),
        }
        assert!(
            died.elapsed() < lease * 10,
            "the dead replica's slots never came back"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        died.elapsed() >= lease / 2,
        "slots came back before the lease could pass"
    );
    // The survivor holds its slot past several leases: its renewals keep it.
    survivor.acquire_run(RunId::new()).await.unwrap();
    tokio::time::sleep(lease * 3).await;
    let e = survivor.acquire_run(RunId::new()).await.unwrap_err();
    assert!(
        refused_as(&e, "max_concurrent_runs"),
        "renewed leases keep their slots: {e:?}"
    );
}

/// Redis stops answering (a proxy in front of it goes away): every admission fails closed with
/// `Coordination`, within the timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_fails_admission_closed() {
    use tokio::net::{TcpListener, TcpStream};
    let prefix = Prefix::new("down");
    let base = redis_url();
    let (upstream, db) = base
        .trim_start_matches("redis://")
        .split_once('/')
        .map(|(h, d)| (h.to_string(), d.to_string()))
        .unwrap_or_else(|| (base.trim_start_matches("redis://").to_string(), "0".into()));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let proxy = {
        let stop_rx = stop_rx.clone();
        tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else {
                    return;
                };
                let upstream = upstream.clone();
                let mut stop = stop_rx.clone();
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(&upstream).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = stop.wait_for(|s| *s) => {}
                    }
                });
                if *stop_rx.borrow() {
                    return;
                }
            }
        })
    };
    let proxied = format!("redis://127.0.0.1:{port}/{db}");
    let h = QuotaHandle::new(RedisQuota::new(
        connection(&proxied).await,
        &prefix.0,
        TenantId::new(),
        quotas(100, 5, 5, 1000),
        0,
        Duration::from_secs(30),
    ));
    h.admit_request().await.unwrap();
    // Down: the proxy drops every connection and accepts no more.
    stop_tx.send(true).unwrap();
    proxy.abort();
    let started = Instant::now();
    for what in [
        "admit_request",
        "acquire_run",
        "reserve_tokens",
        "reserve_session",
    ] {
        let r = match what {
            "admit_request" => h.admit_request().await,
            "acquire_run" => h.acquire_run(RunId::new()).await,
            "reserve_tokens" => h.reserve_tokens(10).await.map(|r| r.settle(0)),
            _ => h.reserve_session(UserId::new(), Some(0)).await.map(|_| ()),
        };
        match r {
            Err(QuotaError::Coordination(_)) => {}
            other => panic!("{what} with Redis down: {other:?}"),
        }
    }
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "each refusal comes within the timeout"
    );
}
