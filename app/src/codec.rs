//! How a page's data crosses from the server-rendered HTML into the browser.
//!
//! Leptos' default resource codec decodes with `serde_json::from_str`, while
//! server functions decode their responses with `serde_json::from_slice`.
//! Those are two different deserializers, so every wire type's `Deserialize`
//! was compiled twice into the wasm client (once per reader). Every resource
//! in the app uses [`Json`] instead, which decodes through the same
//! `from_slice` as the server functions: one copy of each type's decoder,
//! and a smaller client (docs/benchmarks.md, "Browser client size").

use leptos::prelude::*;
use leptos::server::codee::{Decoder, Encoder};
use serde::{de::DeserializeOwned, Serialize};
use std::future::Future;

/// JSON, decoded with the server functions' reader (see the module docs).
pub struct Json;

impl<T: Serialize> Encoder<T> for Json {
    type Error = serde_json::Error;
    type Encoded = String;

    fn encode(val: &T) -> Result<String, serde_json::Error> {
        serde_json::to_string(val)
    }
}

impl<T: DeserializeOwned> Decoder<T> for Json {
    type Error = serde_json::Error;
    type Encoded = str;

    fn decode(val: &str) -> Result<T, serde_json::Error> {
        serde_json::from_slice(val.as_bytes())
    }
}

/// A resource whose value the server serializes into the page and the browser
/// decodes with [`Json`].
pub type JsonResource<T> = Resource<T, Json>;

/// [`Resource::new`], with the app's codec: `fetcher` runs on the server for
/// the first render and again in the browser whenever `source` changes.
#[track_caller]
pub fn resource<S, T, Fut>(
    source: impl Fn() -> S + Send + Sync + 'static,
    fetcher: impl Fn(S) -> Fut + Send + Sync + 'static,
) -> JsonResource<T>
where
    S: Send + Sync + Clone + PartialEq + 'static,
    T: Serialize + DeserializeOwned + Send + Sync + 'static,
    Fut: Future<Output = T> + Send + 'static,
{
    Resource::new_with_options(source, fetcher, false)
}
