//! [`Link`]: the network between an SDK client and its fake, which a test
//! slows down or cuts. A cut link takes each request and never answers, as
//! a firewall that drops packets does: only the client's attempt timeout
//! ends the attempt, and a client without one waits for ever.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, SharedHttpClient, SharedHttpConnector,
    http_client_fn,
};
use aws_smithy_runtime_api::client::orchestrator::HttpRequest;

use crate::aws::clients::rebuilt;
use crate::lock::lock;

/// How a [`Link`] passes the requests it affects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Up,
    Slow(Duration),
    Cut,
}

/// A link between clients and their fakes; put a client behind it with
/// [`kinesis`](Self::kinesis), [`s3`](Self::s3) or
/// [`dynamodb`](Self::dynamodb).
#[derive(Debug)]
pub struct Link {
    /// Which requests the link's state applies to; the others pass at once.
    affects: fn(&HttpRequest) -> bool,
    state: Mutex<State>,
    /// The operation of each request sent while the link was slow or cut,
    /// in order (`X-Amz-Target`'s operation, else the HTTP method).
    held: Mutex<Vec<String>>,
}

impl Link {
    /// A link, up, for every request.
    pub fn new() -> Arc<Self> {
        Self::only(|_| true)
    }

    /// A link, up, whose state applies only to the requests `affects`
    /// picks (S3 PUTs, say).
    pub fn only(affects: fn(&HttpRequest) -> bool) -> Arc<Self> {
        Arc::new(Self {
            affects,
            state: Mutex::new(State::Up),
            held: Mutex::new(Vec::new()),
        })
    }

    /// Requests from now on are never answered.
    pub fn cut(&self) {
        *lock(&self.state) = State::Cut;
    }

    /// Requests from now on are answered after `delay`.
    pub fn slow(&self, delay: Duration) {
        *lock(&self.state) = State::Slow(delay);
    }

    /// Requests from now on are answered at once (those already held stay
    /// held).
    pub fn restore(&self) {
        *lock(&self.state) = State::Up;
    }

    /// The operations of the requests sent while slow or cut, in order.
    pub fn held(&self) -> Vec<String> {
        lock(&self.held).clone()
    }

    /// `client` behind this link.
    pub fn kinesis(self: &Arc<Self>, client: &aws_sdk_kinesis::Client) -> aws_sdk_kinesis::Client {
        rebuilt!(
            aws_sdk_kinesis,
            client,
            http_client(self.wrap(client.config().http_client()))
        )
    }

    /// `client` behind this link.
    pub fn s3(self: &Arc<Self>, client: &aws_sdk_s3::Client) -> aws_sdk_s3::Client {
        rebuilt!(
            aws_sdk_s3,
            client,
            http_client(self.wrap(client.config().http_client()))
        )
    }

    /// `client` behind this link.
    pub fn dynamodb(
        self: &Arc<Self>,
        client: &aws_sdk_dynamodb::Client,
    ) -> aws_sdk_dynamodb::Client {
        rebuilt!(
            aws_sdk_dynamodb,
            client,
            http_client(self.wrap(client.config().http_client()))
        )
    }

    fn wrap(self: &Arc<Self>, inner: Option<SharedHttpClient>) -> SharedHttpClient {
        let inner = inner.expect("a fake client has an HTTP client");
        let link = self.clone();
        http_client_fn(move |settings, components| {
            SharedHttpConnector::new(Through {
                link: link.clone(),
                inner: inner.http_connector(settings, components),
            })
        })
    }
}

/// One client's connector, through a [`Link`].
#[derive(Debug)]
struct Through {
    link: Arc<Link>,
    inner: SharedHttpConnector,
}

impl HttpConnector for Through {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let state = if (self.link.affects)(&request) {
            *lock(&self.link.state)
        } else {
            State::Up
        };
        if state != State::Up {
            lock(&self.link.held).push(operation(&request));
        }
        match state {
            State::Up => self.inner.call(request),
            State::Slow(delay) => {
                let answer = self.inner.call(request);
                HttpConnectorFuture::new(async move {
                    tokio::time::sleep(delay).await;
                    answer.await
                })
            }
            State::Cut => HttpConnectorFuture::new(std::future::pending()),
        }
    }
}

/// `ListShards` for a `Kinesis_20131202.ListShards` target; the HTTP
/// method for S3.
fn operation(request: &HttpRequest) -> String {
    request
        .headers()
        .get("x-amz-target")
        .and_then(|target| target.rsplit('.').next())
        .unwrap_or(request.method())
        .to_owned()
}
