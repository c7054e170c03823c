//! A bounded request loop through the router: `workers` clients each sending one request at
//! a time to an app host until stopped (at most 2 minutes or 20,000 requests), counting what
//! failed, when (since the loop started) and why.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::BodyExt;

pub struct Load {
    stop: Arc<AtomicBool>,
    workers: Vec<tokio::task::JoinHandle<(u32, Vec<String>)>>,
}

impl Load {
    pub fn start(router: SocketAddr, host: &str, workers: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let workers = (0..workers)
            .map(|_| tokio::spawn(worker(router, host.to_owned(), stop.clone())))
            .collect();
        Load { stop, workers }
    }

    /// Stops the loop: the requests that succeeded and the failures.
    pub async fn stop(self) -> (u32, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        let (mut ok, mut failed) = (0, Vec::new());
        for worker in self.workers {
            let (n, errors) = worker.await.expect("a load worker");
            ok += n;
            failed.extend(errors);
        }
        (ok, failed)
    }
}

async fn worker(router: SocketAddr, host: String, stop: Arc<AtomicBool>) -> (u32, Vec<String>) {
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Empty<bytes::Bytes>>();
    let (mut ok, mut failed) = (0u32, Vec::new());
    let started = Instant::now();
    while !stop.load(Ordering::Relaxed)
        && started.elapsed() < Duration::from_secs(120)
        && ok + (failed.len() as u32) < 20_000
    {
        let request = http::Request::get(format!("http://{router}/"))
            .header("host", &host)
            .body(http_body_util::Empty::new())
            .expect("a request");
        match client.request(request).await {
            Ok(response) if response.status() == 200 => {
                match response.into_body().collect().await {
                    Ok(_) => ok += 1,
                    Err(error) => failed.push(format!("body: {error}")),
                }
            }
            Ok(response) => failed.push(format!(
                "at {:.1?}: status {}",
                started.elapsed(),
                response.status()
            )),
            Err(error) => failed.push(format!("at {:.1?}: error: {error:?}", started.elapsed())),
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    (ok, failed)
}
