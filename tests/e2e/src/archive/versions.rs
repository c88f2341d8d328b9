//! Object versions in a versioned bucket, and the keys that were
//! overwritten or deleted (contract line 2).

use std::collections::HashMap;

use anyhow::{Context as _, Result};

use crate::env::TestEnv;

/// One version (or delete marker) of an object in a versioned bucket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectVersion {
    /// The key.
    pub key: String,
    /// The version id.
    pub version_id: Option<String>,
    /// Whether this is the current version.
    pub is_latest: bool,
    /// Whether this is a delete marker rather than data.
    pub is_delete_marker: bool,
}

/// Every version and delete marker under `prefix` (`ListObjectVersions`,
/// all pages).
///
/// API: <https://docs.aws.amazon.com/AmazonS3/latest/API/API_ListObjectVersions.html>
///
/// # Errors
/// Any AWS error.
pub async fn list_object_versions(
    env: &TestEnv,
    bucket: &str,
    prefix: &str,
) -> Result<Vec<ObjectVersion>> {
    let mut out = Vec::new();
    let mut key_marker: Option<String> = None;
    let mut version_marker: Option<String> = None;
    loop {
        let page = env
            .s3
            .list_object_versions()
            .bucket(bucket)
            .prefix(prefix)
            .set_key_marker(key_marker.take())
            .set_version_id_marker(version_marker.take())
            .send()
            .await
            .with_context(|| format!("failed to list versions of s3://{bucket}/{prefix}"))?;
        for version in page.versions() {
            out.push(ObjectVersion {
                key: version.key().unwrap_or_default().to_owned(),
                version_id: version.version_id().map(str::to_owned),
                is_latest: version.is_latest().unwrap_or_default(),
                is_delete_marker: false,
            });
        }
        for marker in page.delete_markers() {
            out.push(ObjectVersion {
                key: marker.key().unwrap_or_default().to_owned(),
                version_id: marker.version_id().map(str::to_owned),
                is_latest: marker.is_latest().unwrap_or_default(),
                is_delete_marker: true,
            });
        }
        if page.is_truncated() != Some(true) {
            break;
        }
        key_marker = page.next_key_marker().map(str::to_owned);
        version_marker = page.next_version_id_marker().map(str::to_owned);
        if key_marker.is_none() {
            break;
        }
    }
    Ok(out)
}

/// Keys with more than one version, or with a delete marker, as messages
/// (empty when every key was written exactly once: contract line 2).
pub fn overwritten_keys(versions: &[ObjectVersion]) -> Vec<String> {
    let mut by_key: HashMap<&str, Vec<&ObjectVersion>> = HashMap::new();
    for version in versions {
        by_key.entry(&version.key).or_default().push(version);
    }
    let mut problems: Vec<String> = by_key
        .into_iter()
        .filter(|(_, versions)| versions.len() != 1 || versions[0].is_delete_marker)
        .map(|(key, versions)| {
            let markers = versions.iter().filter(|v| v.is_delete_marker).count();
            format!(
                "{key}: {} versions ({markers} delete markers)",
                versions.len()
            )
        })
        .collect();
    problems.sort();
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        let v = |key: &str, marker: bool| ObjectVersion {
            key: key.to_owned(),
            version_id: None,
            is_latest: true,
            is_delete_marker: marker,
        };
        assert!(overwritten_keys(&[v("a", false), v("b", false)]).is_empty());
        assert_eq!(overwritten_keys(&[v("a", false), v("a", false)]).len(), 1);
        assert_eq!(overwritten_keys(&[v("a", true)]).len(), 1);
    }
}
