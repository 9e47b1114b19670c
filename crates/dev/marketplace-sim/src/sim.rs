//! Starting the simulator: [`Simulator::start`] binds 127.0.0.1, serves the wire
//! protocol and the admin API, and hands back a [`RunningSim`] whose
//! [`SimHandle`] drives the same state from Rust without HTTP.

use std::net::SocketAddr;
use std::time::Instant;

use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tracing::info;

use crate::config::SimConfig;
use crate::engine::Engine;
use crate::error::SimError;
use crate::handle::SimHandle;
use crate::server::router;
use crate::validate::Patterns;

/// Starts simulators.
#[derive(Debug, Clone, Copy)]
pub struct Simulator;

impl Simulator {
    /// Builds the state `config` describes and serves it on 127.0.0.1:`config.port`
    /// (0: a free port). Fails on an invalid configuration or an unavailable port.
    pub async fn start(config: SimConfig) -> Result<RunningSim, SimError> {
        let patterns = Patterns::compile()?;
        let port = config.port;
        let engine = Engine::new(config, patterns, Instant::now())
            .map_err(|e| SimError::ConfigInvalid(e.to_string()))?;
        let handle = SimHandle::new(engine);
        let requested = SocketAddr::from(([127, 0, 0, 1], port));
        let listener = TcpListener::bind(requested)
            .await
            .map_err(|source| SimError::Bind {
                addr: requested.to_string(),
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| SimError::Bind {
            addr: requested.to_string(),
            source,
        })?;
        let (stop, stopped) = oneshot::channel::<()>();
        let app = router(handle.clone());
        let task = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    // A dropped sender stops the server too.
                    let _ = stopped.await;
                })
                .await
        });
        info!(%addr, "marketplace simulator listening");
        Ok(RunningSim {
            addr,
            handle,
            stop: Some(stop),
            task,
        })
    }
}

/// A simulator serving in the background. Dropping it stops the server.
#[derive(Debug)]
pub struct RunningSim {
    addr: SocketAddr,
    handle: SimHandle,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<std::io::Result<()>>,
}

impl RunningSim {
    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`, for `endpoint_url` / `AWS_ENDPOINT_URL_MARKETPLACE_METERING`.
    pub fn endpoint_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The handle on the simulator's state.
    pub fn handle(&self) -> &SimHandle {
        &self.handle
    }

    /// Stops accepting calls, lets calls in progress finish, and waits for the
    /// server to end.
    pub async fn shutdown(mut self) -> Result<(), SimError> {
        if let Some(stop) = self.stop.take() {
            // The server may already be gone; then there is nobody to tell.
            let _ = stop.send(());
        }
        match (&mut self.task).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(SimError::Serve(e)),
            Err(e) => Err(SimError::Join(e.to_string())),
        }
    }
}
