//! Reading the whole archive: list, GET each new object once, decode.

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::Result;

use super::{
    Archive, ArchiveProblem, ArchivedObject, ObjectKey, decode_object, get_object, list_objects,
};
use crate::env::TestEnv;

/// Reads the archive repeatedly, fetching each object once: objects are
/// immutable, so an object listed again with the same ETag and size is
/// taken from the cache. Objects that disappear from the listing disappear
/// from the next snapshot.
#[derive(Debug)]
pub struct ArchiveReader {
    env: TestEnv,
    bucket: String,
    prefix: String,
    cache: HashMap<String, Arc<ArchivedObject>>,
}

impl ArchiveReader {
    /// A reader for the objects the daemon writes under `{prefix}/` in
    /// `bucket`.
    pub fn new(env: &TestEnv, bucket: &str, prefix: &str) -> Self {
        Self {
            env: env.clone(),
            bucket: bucket.to_owned(),
            prefix: prefix.to_owned(),
            cache: HashMap::new(),
        }
    }

    /// Lists the whole bucket and returns a snapshot.
    ///
    /// # Errors
    /// An AWS error while listing or getting.
    pub async fn read(&mut self) -> Result<Archive> {
        let listed = list_objects(&self.env, &self.bucket, "").await?;
        let mut objects = Vec::new();
        let mut stray_keys = Vec::new();
        let mut layout_record = None;
        let mut cache = HashMap::new();
        for entry in listed {
            if entry.key == format!("{}/_shardsink.json", self.prefix) {
                let body = get_object(&self.env, &self.bucket, &entry.key).await?;
                layout_record = body.map(|body| String::from_utf8_lossy(&body).into_owned());
                continue;
            }
            let key = match ObjectKey::parse(&self.prefix, &entry.key) {
                Ok(key) => key,
                Err(message) => {
                    stray_keys.push(ArchiveProblem {
                        object_key: entry.key,
                        line: None,
                        message: format!("key does not follow the contract: {message}"),
                    });
                    continue;
                }
            };
            let object = match self.cache.get(&entry.key) {
                Some(cached) if cached.e_tag == entry.e_tag && cached.size == entry.size => {
                    Arc::clone(cached)
                }
                _ => {
                    let Some(body) = get_object(&self.env, &self.bucket, &entry.key).await? else {
                        // Deleted between LIST and GET.
                        continue;
                    };
                    let (records, problems) = decode_object(&key, &body);
                    Arc::new(ArchivedObject {
                        key,
                        e_tag: entry.e_tag,
                        size: body.len(),
                        records,
                        problems,
                    })
                }
            };
            cache.insert(entry.key, Arc::clone(&object));
            objects.push(object);
        }
        self.cache = cache;
        objects.sort_by(|a, b| a.key.key.cmp(&b.key.key));
        Ok(Archive {
            bucket: self.bucket.clone(),
            prefix: self.prefix.clone(),
            objects,
            stray_keys,
            layout_record,
        })
    }
}

/// A one-off [`ArchiveReader::read`].
///
/// # Errors
/// As [`ArchiveReader::read`].
pub async fn read_archive(env: &TestEnv, bucket: &str, prefix: &str) -> Result<Archive> {
    ArchiveReader::new(env, bucket, prefix).read().await
}
