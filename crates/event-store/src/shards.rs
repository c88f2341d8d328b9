//! What the local store keeps per shard besides its copies — the
//! watermark, the ended mark, the horizon and when the shard was last
//! written — and how shards not written for a long time are forgotten.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fjall::OwnedWriteBatch;
use sequence_range::SequenceNumber;

use crate::codec::{self, Tag};
use crate::error::LocalStoreError;
use crate::store::{Inner, LocalStore};
use crate::tenants::FORGOTTEN;

/// How far a shard has been decided here, and with which settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watermark {
    /// The event settings' description (`settings_description`): copies
    /// decided with other settings are not comparable.
    pub settings: String,
    /// The last sequence number decided.
    pub through: SequenceNumber,
}

impl LocalStore {
    /// The watermark of `shard_id`, if it has one.
    ///
    /// # Errors
    /// [`LocalStoreError::Storage`], [`LocalStoreError::Corrupt`].
    pub fn watermark(&self, shard_id: &str) -> Result<Option<Watermark>, LocalStoreError> {
        let inner = &*self.inner;
        let key = codec::shard_key(Tag::Watermark, shard_id);
        let Some(value) = inner
            .shards
            .get(&key)
            .map_err(|source| inner.storage(source))?
        else {
            return Ok(None);
        };
        let (settings, through) =
            codec::decode_watermark(&value).map_err(|_| inner.corrupt_shard_key(&key))?;
        Ok(Some(Watermark { settings, through }))
    }

    /// Sets the watermark of `shard_id` (after a rebuild; [`decide`](Self::decide)
    /// sets it with its decisions).
    ///
    /// # Errors
    /// [`LocalStoreError::Storage`].
    pub fn set_watermark(
        &self,
        shard_id: &str,
        watermark: &Watermark,
    ) -> Result<(), LocalStoreError> {
        let inner = &*self.inner;
        let _lock = inner.lock(shard_id);
        let mut batch = inner.batch();
        batch.insert(
            &inner.shards,
            codec::shard_key(Tag::Watermark, shard_id),
            codec::encode_watermark(&watermark.settings, &watermark.through),
        );
        inner.touch(&mut batch, shard_id);
        batch.commit().map_err(|source| inner.storage(source))
    }

    /// Records that `shard_id` was read to `SHARD_END` and decided here with
    /// `settings`: its copies are complete for its children.
    ///
    /// # Errors
    /// [`LocalStoreError::Storage`].
    pub fn mark_ended(&self, shard_id: &str, settings: &str) -> Result<(), LocalStoreError> {
        let inner = &*self.inner;
        let _lock = inner.lock(shard_id);
        let mut batch = inner.batch();
        batch.insert(
            &inner.shards,
            codec::shard_key(Tag::Ended, shard_id),
            settings.as_bytes(),
        );
        inner.touch(&mut batch, shard_id);
        batch.commit().map_err(|source| inner.storage(source))
    }

    /// Whether `shard_id` was marked ended with these `settings`.
    ///
    /// # Errors
    /// [`LocalStoreError::Storage`].
    pub fn is_ended(&self, shard_id: &str, settings: &str) -> Result<bool, LocalStoreError> {
        let inner = &*self.inner;
        let value = inner
            .shards
            .get(codec::shard_key(Tag::Ended, shard_id))
            .map_err(|source| inner.storage(source))?;
        Ok(value.is_some_and(|value| *value == *settings.as_bytes()))
    }

    /// Raises the horizon of `shard_id` to `arrival_millis` (ms since the
    /// epoch): reads leave out its copies that arrived earlier; its values
    /// whose newest copy arrived earlier are removed by compaction or with
    /// their epoch, and such copies are dropped when their value is
    /// rewritten. Callers pass the last decided arrival minus twice
    /// the window minus an hour, so nothing a replay may consult goes. A
    /// horizon never moves back: a lower one is ignored.
    ///
    /// # Errors
    /// [`LocalStoreError::Storage`].
    pub fn advance_horizon(
        &self,
        shard_id: &str,
        arrival_millis: i64,
    ) -> Result<(), LocalStoreError> {
        let inner = &*self.inner;
        let _lock = inner.lock(shard_id);
        let tenant = inner.tenant(shard_id)?;
        if inner
            .tenants
            .read()
            .horizons
            .get(&tenant)
            .is_some_and(|current| *current >= arrival_millis)
        {
            return Ok(());
        }
        inner
            .shards
            .insert(
                codec::shard_key(Tag::Horizon, shard_id),
                codec::encode_time(arrival_millis),
            )
            .map_err(|source| inner.storage(source))?;
        inner
            .tenants
            .write()
            .horizons
            .insert(tenant, arrival_millis);
        inner.filters.expire(tenant, arrival_millis);
        Ok(())
    }

    /// The horizon of `shard_id`: `None` when it has none, `Some(i64::MAX)`
    /// when it was forgotten.
    #[cfg(test)]
    pub fn horizon(&self, shard_id: &str) -> Option<i64> {
        self.inner.tenants.horizon(shard_id)
    }
}

impl Inner {
    /// Adds to `batch` that `shard_id` is written now, and brings a
    /// forgotten shard back (its horizon removed, so that compaction keeps
    /// its new copies; copies from before it was forgotten that compaction
    /// has not dropped yet come back too, and are true facts).
    pub(crate) fn touch(&self, batch: &mut OwnedWriteBatch, shard_id: &str) {
        batch.insert(
            &self.shards,
            codec::shard_key(Tag::Touched, shard_id),
            codec::encode_time(now_millis()),
        );
        let mut map = self.tenants.write();
        let Some(tenant) = map.by_shard.get(shard_id).copied() else {
            return;
        };
        if map.horizons.get(&tenant) == Some(&FORGOTTEN) {
            // Removed from memory before the batch commits: a compaction
            // starting in between must not drop the new copies.
            map.horizons.remove(&tenant);
            batch.remove(&self.shards, codec::shard_key(Tag::Horizon, shard_id));
        }
    }

    /// Loads the tenants and horizons, and forgets the shards not written for
    /// `forget_after`: watermark, ended mark and written time removed,
    /// horizon set to [`FORGOTTEN`] so compaction drops their copies.
    pub(crate) fn load_shards(&self, forget_after: Duration) -> Result<(), LocalStoreError> {
        let forget_after = i64::try_from(forget_after.as_millis()).unwrap_or(i64::MAX);
        let forget_through = now_millis().saturating_sub(forget_after);
        let mut stale = Vec::new();
        let mut horizons = Vec::new();
        let mut map = self.tenants.write();
        for item in self.shards.iter() {
            let (key, value) = item.into_inner().map_err(|source| self.storage(source))?;
            let Some((tag, shard)) = Tag::of_key(&key) else {
                continue;
            };
            let shard = std::str::from_utf8(shard).map_err(|_| self.corrupt_shard_key(&key))?;
            match tag {
                Tag::Horizon => {
                    let horizon =
                        codec::decode_time(&value).map_err(|_| self.corrupt_shard_key(&key))?;
                    horizons.push((shard.to_owned(), horizon));
                }
                Tag::Tenant => {
                    let tenant =
                        codec::decode_tenant(&value).map_err(|_| self.corrupt_shard_key(&key))?;
                    map.by_shard.insert(Box::from(shard), tenant);
                    map.next = map.next.max(tenant.saturating_add(1));
                }
                Tag::Touched => {
                    let touched =
                        codec::decode_time(&value).map_err(|_| self.corrupt_shard_key(&key))?;
                    if touched <= forget_through {
                        stale.push(shard.to_owned());
                    }
                }
                Tag::Watermark | Tag::Ended => {}
            }
        }
        for (shard, horizon) in horizons {
            if let Some(tenant) = map.by_shard.get(&*shard).copied() {
                map.horizons.insert(tenant, horizon);
            }
        }
        if stale.is_empty() {
            return Ok(());
        }
        let mut batch = self.batch();
        for shard in &stale {
            for tag in [Tag::Watermark, Tag::Ended, Tag::Touched] {
                batch.remove(&self.shards, codec::shard_key(tag, shard));
            }
            // A shard without a tenant has no copies to drop.
            if let Some(tenant) = map.by_shard.get(&**shard).copied() {
                batch.insert(
                    &self.shards,
                    codec::shard_key(Tag::Horizon, shard),
                    codec::encode_time(FORGOTTEN),
                );
                map.horizons.insert(tenant, FORGOTTEN);
            }
        }
        batch.commit().map_err(|source| self.storage(source))?;
        tracing::info!(
            path = %self.path.display(),
            shards = stale.len(),
            "event store forgot shards not written for a long time"
        );
        Ok(())
    }
}

/// The wall clock, ms since the Unix epoch (0 before it).
fn now_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
        })
}
