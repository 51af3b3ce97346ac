//! The HTTP adapter of Medusa Playground: the original simple API (`/generate/*`, `/compare`),
//! an OpenAI-compatible API (`/v1/*`), the playground's own API (`/api/*`, what the web UI
//! uses), health and Prometheus metrics, and the web UI's files. Every operation is the
//! application layer's ([`playground::Playground`]); this crate maps HTTP onto it.

mod api;
mod auth;
mod body_timeout;
mod catalog_api;
mod conversations_api;
mod error;
mod event_socket;
mod event_socket_places;
mod extract;
mod guard;
mod headers;
mod import_turn;
mod json_reader;
mod listener;
mod metrics;
mod openai;
mod paths;
mod remotes_api;
mod sampling;
mod simple_api;
mod state;
mod training_api;

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use axum::routing::{any, delete, get, post, put};
use axum::{Extension, Router};
use event_socket_places::EventSockets;
use extract::BodyLimit;
use import_turn::ImportPlace;
use playground::catalog::Catalog;
use playground::{AppError, Playground};
use tokio::net::TcpListener;
use tower_http::classify::ServerErrorsFailureClass;
use tower_http::services::{ServeDir, ServeFile};
use tower_http::trace::TraceLayer;

pub use auth::ApiKey;
pub use error::{ApiError, ServerError};
pub use extract::{BODY_LIMIT, IMPORT_BODY_LIMIT};
pub use guard::{is_loopback_name, AccessPolicy};
pub use listener::ConnectionLimits;
pub use openai::EmbeddingTokenIds;
pub use state::ServerState;

/// Where to listen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    pub host: String,
    /// 0 picks a free port.
    pub port: u16,
    /// The built web UI (`ui/dist`), served at `/` when given.
    pub ui_dir: Option<PathBuf>,
    /// Hosts and origins accepted beyond this machine's own.
    pub access: AccessPolicy,
    pub limits: ConnectionLimits,
    /// Whose token ids `/v1/embeddings` reads.
    pub embedding_token_ids: EmbeddingTokenIds,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            host: "127.0.0.1".into(),
            port: 8080,
            ui_dir: None,
            access: AccessPolicy::default(),
            limits: ConnectionLimits::default(),
            embedding_token_ids: EmbeddingTokenIds::default(),
        }
    }
}

/// The API alone, for this machine's own clients.
pub fn router(playground: Playground) -> Router {
    router_with_ui(playground, None, AccessPolicy::default())
}

/// The API, and the web UI's files from `ui_dir` for every other path (the UI routes itself, so
/// unknown paths get its `index.html`); every request first passes `access`.
pub fn router_with_ui(
    playground: Playground,
    ui_dir: Option<&Path>,
    access: AccessPolicy,
) -> Router {
    router_within(
        playground,
        ui_dir,
        access,
        &ConnectionLimits::default(),
        EmbeddingTokenIds::default(),
    )
}

/// [`router_with_ui`], its event sockets bounded and kept alive as `limits` say, embeddings'
/// token ids read as `embedding_token_ids` says.
fn router_within(
    playground: Playground,
    ui_dir: Option<&Path>,
    access: AccessPolicy,
    limits: &ConnectionLimits,
    embedding_token_ids: EmbeddingTokenIds,
) -> Router {
    // Downloads go to the models cache, which `serve` lets `/api/model` load from.
    let download_dir = models::cache_dir()
        .ok()
        .or_else(|| access.loadable_dirs.first().cloned())
        .unwrap_or_else(|| std::env::temp_dir().join("medusa-models"));
    let catalog = Arc::new(Catalog::new(download_dir, access.loadable_dirs.clone()));
    let access = Arc::new(access);
    let state = ServerState {
        playground,
        requests: Arc::default(),
        access: access.clone(),
        catalog,
        event_sockets: Arc::new(EventSockets::new(
            limits.max_event_sockets,
            limits.keep_alive_interval,
        )),
        imports: ImportPlace::default(),
        embedding_token_ids,
    };
    let api_not_found = || async { ApiError::not_found("no such endpoint") };
    let router = Router::new()
        .route("/generate/normal", post(simple_api::generate_normal))
        .route("/generate/medusa", post(simple_api::generate_medusa))
        .route("/compare", post(simple_api::compare))
        .route("/v1/chat/completions", post(openai::chat_completions))
        .route("/v1/completions", post(openai::completions))
        .route("/v1/responses", post(openai::responses))
        .route("/v1/embeddings", post(openai::embeddings))
        .route("/v1/models", get(openai::models))
        .route("/v1/models/{*id}", get(openai::model))
        .route("/chat/completions", post(openai::chat_completions))
        .route("/completions", post(openai::completions))
        .route("/responses", post(openai::responses))
        .route("/embeddings", post(openai::embeddings))
        .route("/models", get(openai::models))
        .route("/models/{*id}", get(openai::model))
        .route("/api/runs", get(api::list_runs))
        .route("/api/runs/export", get(api::export_runs))
        .route(
            "/api/runs/import",
            post(api::import_runs).layer(Extension(BodyLimit(IMPORT_BODY_LIMIT))),
        )
        .route("/api/runs/delete", post(api::delete_runs))
        .route("/api/runs/{id}", get(api::get_run).delete(api::delete_run))
        .route("/api/runs/{id}/cancel", post(api::cancel_run))
        .route(
            "/api/comparisons",
            get(api::list_comparisons).post(api::create_comparison),
        )
        .route("/api/comparisons/{id}", get(api::get_comparison))
        .route("/api/info", get(api::info))
        .route("/api/model", post(api::load_model))
        .route("/api/model/tree", put(api::set_tree))
        .route("/api/models/local", get(catalog_api::on_disk))
        .route("/api/models/local/{file}", delete(catalog_api::delete))
        .route("/api/catalog", get(catalog_api::search))
        .route("/api/catalog/download", post(catalog_api::download))
        .route("/api/catalog/cancel", post(catalog_api::cancel))
        .route("/api/catalog/{owner}/{name}", get(catalog_api::files))
        .route("/api/tune", post(api::tune))
        .route("/api/divergence", post(api::divergence))
        .route(
            "/api/remotes",
            get(remotes_api::list).post(remotes_api::add),
        )
        .route("/api/remotes/{name}", delete(remotes_api::remove))
        .route("/api/generate", post(api::generate))
        .route("/api/events", get(event_socket::upgrade))
        .route(
            "/api/conversations",
            get(conversations_api::list).post(conversations_api::create),
        )
        .route(
            "/api/conversations/{id}",
            get(conversations_api::get)
                .patch(conversations_api::update)
                .delete(conversations_api::delete),
        )
        .route(
            "/api/conversations/{id}/export",
            get(conversations_api::export),
        )
        .route(
            "/api/training",
            get(training_api::list).post(training_api::start),
        )
        .route("/api/training/heads", get(training_api::planned_heads))
        .route(
            "/api/training/{id}",
            get(training_api::get).delete(training_api::delete),
        )
        .route("/api/training/{id}/cancel", post(training_api::cancel))
        .route("/api/training/{id}/resume", post(training_api::resume))
        .route("/api/training/{id}/events", get(training_api::events))
        .route("/health", get(api::health))
        .route("/metrics", get(api::metrics))
        .route("/api/{*rest}", any(api_not_found))
        .route("/v1/{*rest}", any(api_not_found));
    let router = match ui_dir {
        Some(dir) => router.fallback_service(
            ServeDir::new(dir).not_found_service(ServeFile::new(dir.join("index.html"))),
        ),
        None => router.fallback(api_not_found),
    };
    let router = router.layer(Extension(BodyLimit(BODY_LIMIT))).route_layer(
        axum::middleware::from_fn_with_state(state.clone(), metrics::count_requests),
    );
    let router = match guard::cors(&access) {
        Some(cors) => router.layer(cors),
        None => router,
    };
    router
        .layer(axum::middleware::from_fn_with_state(access, guard::guard))
        .layer(axum::middleware::map_response(
            headers::add_security_headers,
        ))
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(request_span)
                .on_failure(log_failure),
        )
        .with_state(state)
}

/// The span of a request, as tower-http's default one but with the query string left out: it can
/// hold the API key (`?token=`).
fn request_span(request: &axum::http::Request<axum::body::Body>) -> tracing::Span {
    tracing::debug_span!(
        "request",
        method = %request.method(),
        uri = %guard::loggable_uri(request.uri()),
        version = ?request.version(),
    )
}

/// Failures as tower-http logs them (errors), but for 503s: refusals under load (a full queue,
/// every event socket taken) are no failure of the server's, are logged where they are decided,
/// and anyone can cause many of them.
fn log_failure(class: ServerErrorsFailureClass, latency: Duration, _span: &tracing::Span) {
    let latency_ms = latency.as_millis();
    match class {
        ServerErrorsFailureClass::StatusCode(StatusCode::SERVICE_UNAVAILABLE) => {
            tracing::debug!(latency_ms, "response refused: unavailable now");
        }
        class => tracing::error!(classification = %class, latency_ms, "response failed"),
    }
}

/// A bound listener with its router, not yet serving.
pub struct Server {
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    access: Arc<AccessPolicy>,
}

impl Server {
    pub async fn bind(config: &ServerConfig, playground: Playground) -> Result<Self, ServerError> {
        let address = format!("{}:{}", config.host, config.port);
        let listener = TcpListener::bind(&address)
            .await
            .map_err(|source| ServerError::Bind { address, source })?;
        // The listener holds bodies to their deadline (see `listener`).
        let router = router_within(
            playground,
            config.ui_dir.as_deref(),
            config.access.clone(),
            &config.limits,
            config.embedding_token_ids,
        );
        Ok(Self {
            listener,
            router,
            limits: config.limits,
            access: Arc::new(config.access.clone()),
        })
    }

    pub fn local_addr(&self) -> Result<SocketAddr, ServerError> {
        Ok(self.listener.local_addr()?)
    }

    /// Serves until `shutdown` completes, then lets open requests finish.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServerError> {
        listener::serve(
            self.listener,
            self.router,
            self.limits,
            self.access,
            shutdown,
        )
        .await;
        Ok(())
    }
}

/// Binds, prints `listening on http://HOST:PORT` to stdout and serves until Ctrl-C or SIGTERM.
/// While the first model loads, the API answers 503 `model_loading` with its stage and share
/// (`/health`, `/api/info`) and the UI shows the load; once it is in, `when_loaded` runs on the
/// playground and `ready: MODEL` is printed. A first model that fails to load ends the server
/// with the reason.
pub async fn serve(
    config: ServerConfig,
    playground: Playground,
    when_loaded: impl FnOnce(&Playground) -> Result<(), AppError>,
) -> Result<(), ServerError> {
    let server = Server::bind(&config, playground.clone()).await?;
    let address = server.local_addr()?;
    {
        use std::io::Write;
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "listening on http://{address}")?;
        if let Some(key) = &config.access.api_key {
            writeln!(
                stdout,
                "open the web UI at http://{address}/?token={}",
                key.as_str()
            )?;
        }
        stdout.flush()?;
    }
    tracing::info!(%address, "serving");
    let serving = server.run(shutdown_signal());
    tokio::pin!(serving);
    tokio::select! {
        loaded = first_model(&playground) => {
            let name = loaded.map_err(|e| ServerError::ModelLoad(e.message))?;
            when_loaded(&playground).map_err(|e| ServerError::ModelLoad(e.message))?;
            {
                use std::io::Write;
                let mut stdout = std::io::stdout().lock();
                writeln!(stdout, "ready: {name}")?;
                stdout.flush()?;
            }
            tracing::info!(model = %name, "ready");
            serving.await
        }
        stopped = &mut serving => stopped,
    }
}

/// The name of the first model once it has loaded, or why it did not.
async fn first_model(playground: &Playground) -> Result<String, AppError> {
    let host = playground.model_host();
    loop {
        // The model is in place before the load is marked over.
        if let Some(model) = host.current_if_loaded() {
            return Ok(model.engine.info().name.clone());
        }
        if host.loading_status().is_none() {
            return playground.model().map(|m| m.engine.info().name.clone());
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = terminate => {}
    }
    tracing::info!("shutting down");
}
