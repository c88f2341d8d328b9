//! The table shardsink creates when it does not exist, and finding or
//! creating it.
//!
//! The columns are the `parquet` format's, in its order
//! (`output::format::parquet`): `shard_id`, `sequence_number`,
//! `sub_sequence_number`, `partition_key`, `approximate_arrival_timestamp`,
//! then `data` or the typed columns of a [`ParquetSchema`]. Iceberg types
//! ([table spec, "Schemas and Data Types"][types]): strings are `string`,
//! the arrival time `timestamptz` (microseconds; Kinesis gives
//! milliseconds), the payload `binary`. Partitioned by
//! `day(approximate_arrival_timestamp)`, or `hour(...)` with hour time
//! buckets ([partition transforms][transforms]).
//!
//! An existing table is used as it is: its schema and partition spec decide
//! the data files, whatever shardsink would have created.
//!
//! [types]: https://iceberg.apache.org/spec/#schemas-and-data-types
//! [transforms]: https://iceberg.apache.org/spec/#partition-transforms

use std::collections::HashMap;

use iceberg::spec::{NestedField, PrimitiveType, Schema, Transform, Type, UnboundPartitionSpec};
use iceberg::table::Table;
use iceberg::{Catalog, ErrorKind, Result as IcebergResult, TableCreation, TableIdent};
use tracing::info;

use crate::output::bucket::TimeBucket;
use crate::output::format::iceberg::JSON_COLUMN_DOC;
use crate::output::format::schema::{
    APPROXIMATE_ARRIVAL_TIMESTAMP, ColumnType, DATA, PARTITION_KEY, ParquetSchema, SEQUENCE_NUMBER,
    SHARD_ID, SUB_SEQUENCE_NUMBER,
};

/// How a created table types its instants (the arrival time and typed
/// `timestamp` payload columns); the values are UTC instants either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Instants {
    /// `timestamptz`: the spec's type for an instant.
    WithZone,
    /// `timestamp`, holding UTC: for the Glue catalog, whose iceberg-rust
    /// client converts no `timestamptz` column to Glue's column types
    /// (`iceberg-catalog-glue` 0.10, "Conversion from Timestamptz is not
    /// supported"); Athena reads either.
    Utc,
}

impl Instants {
    fn primitive(self) -> PrimitiveType {
        match self {
            Self::WithZone => PrimitiveType::Timestamptz,
            Self::Utc => PrimitiveType::Timestamp,
        }
    }
}

/// The schema of a table shardsink creates: the metadata columns (required
/// but `sub_sequence_number`), then `data` (required) or the typed columns
/// of `payload` (optional: a missing member is a null). Field ids from 1 in
/// column order.
///
/// # Errors
/// iceberg's schema validation (not expected: the names are distinct).
pub fn default_schema(
    payload: Option<&ParquetSchema>,
    instants: Instants,
) -> IcebergResult<Schema> {
    let string = || Type::Primitive(PrimitiveType::String);
    let mut fields = vec![
        NestedField::required(1, SHARD_ID, string()),
        NestedField::required(2, SEQUENCE_NUMBER, string()),
        NestedField::optional(3, SUB_SEQUENCE_NUMBER, Type::Primitive(PrimitiveType::Long)),
        NestedField::required(4, PARTITION_KEY, string()),
        NestedField::required(
            5,
            APPROXIMATE_ARRIVAL_TIMESTAMP,
            Type::Primitive(instants.primitive()),
        ),
    ];
    match payload {
        None => fields.push(NestedField::required(
            6,
            DATA,
            Type::Primitive(PrimitiveType::Binary),
        )),
        Some(schema) => {
            for (id, column) in (6..).zip(schema.columns()) {
                let field = NestedField::optional(
                    id,
                    &column.name,
                    Type::Primitive(iceberg_type(column.column_type, instants)),
                );
                fields.push(match column.column_type {
                    ColumnType::Json => field.with_doc(JSON_COLUMN_DOC),
                    _ => field,
                });
            }
        }
    }
    Schema::builder()
        .with_fields(fields.into_iter().map(Into::into))
        .build()
}

/// The Iceberg type of a typed payload column.
pub fn iceberg_type(column_type: ColumnType, instants: Instants) -> PrimitiveType {
    match column_type {
        ColumnType::String | ColumnType::Json => PrimitiveType::String,
        ColumnType::Boolean => PrimitiveType::Boolean,
        ColumnType::Int32 => PrimitiveType::Int,
        ColumnType::Int64 => PrimitiveType::Long,
        ColumnType::Float32 => PrimitiveType::Float,
        ColumnType::Float64 => PrimitiveType::Double,
        ColumnType::Timestamp => instants.primitive(),
        ColumnType::Date => PrimitiveType::Date,
    }
}

/// The partition spec of a table shardsink creates: the arrival time by
/// day, or by hour with hour time buckets.
///
/// # Errors
/// iceberg's validation (not expected).
pub fn default_partition_spec(bucket: TimeBucket) -> IcebergResult<UnboundPartitionSpec> {
    let (transform, suffix) = match bucket {
        TimeBucket::Minute => (Transform::Day, "day"),
        TimeBucket::Hour => (Transform::Hour, "hour"),
    };
    UnboundPartitionSpec::builder()
        .add_partition_field(
            5,
            format!("{APPROXIMATE_ARRIVAL_TIMESTAMP}_{suffix}"),
            transform,
        )
        .map(|builder| builder.build())
}

/// What a table shardsink creates looks like.
#[derive(Debug, Clone)]
pub struct NewTable {
    /// Its schema ([`default_schema`]).
    pub schema: Schema,
    /// Its partition spec ([`default_partition_spec`]).
    pub partition_spec: UnboundPartitionSpec,
    /// Its location, when the catalog does not choose one (`None`: the
    /// catalog's warehouse decides).
    pub location: Option<String>,
}

/// The table, created with `new` if the catalog does not have it (and its
/// namespace with it). A table that another worker creates at the same time
/// is loaded instead.
///
/// # Errors
/// The catalog's errors.
pub async fn find_or_create(
    catalog: &dyn Catalog,
    ident: &TableIdent,
    new: NewTable,
) -> IcebergResult<Table> {
    let namespace = ident.namespace();
    if catalog.namespace_exists(namespace).await? {
        if catalog.table_exists(ident).await? {
            return catalog.load_table(ident).await;
        }
    } else {
        match catalog.create_namespace(namespace, HashMap::new()).await {
            Ok(_) => info!(namespace = %namespace.to_url_string(), "namespace created"),
            Err(err) => {
                // Unless another worker created it first.
                if !catalog.namespace_exists(namespace).await? {
                    return Err(err);
                }
            }
        }
    }
    let creation = TableCreation::builder()
        .name(ident.name().to_owned())
        .schema(new.schema)
        .partition_spec(new.partition_spec)
        .location_opt(new.location)
        .build();
    match catalog.create_table(namespace, creation).await {
        Ok(table) => {
            info!(table = %ident, location = table.metadata().location(), "table created");
            Ok(table)
        }
        Err(err) if err.kind() == ErrorKind::TableAlreadyExists => catalog.load_table(ident).await,
        Err(err) => {
            if catalog.table_exists(ident).await.unwrap_or(false) {
                catalog.load_table(ident).await
            } else {
                Err(err)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::format::schema::SchemaColumn;
    use crate::table::test_support::{default_new_table, memory_catalog};

    #[tokio::test]
    async fn a_missing_table_is_created_partitioned_by_arrival_day_and_then_loaded() {
        let catalog = memory_catalog().await;
        let ident = TableIdent::from_strs(["archive", "events"]).unwrap();
        let new = default_new_table();
        let created = find_or_create(&catalog, &ident, new.clone()).await.unwrap();
        let names: Vec<_> = created
            .metadata()
            .current_schema()
            .as_struct()
            .fields()
            .iter()
            .map(|f| f.name.clone())
            .collect();
        assert_eq!(
            names,
            [
                SHARD_ID,
                SEQUENCE_NUMBER,
                SUB_SEQUENCE_NUMBER,
                PARTITION_KEY,
                APPROXIMATE_ARRIVAL_TIMESTAMP,
                DATA
            ]
        );
        let spec = created.metadata().default_partition_spec();
        assert_eq!(spec.fields().len(), 1);
        assert_eq!(spec.fields()[0].transform, Transform::Day);
        assert_eq!(spec.fields()[0].source_id, 5);
        // Found the second time, not created again.
        let found = find_or_create(&catalog, &ident, new).await.unwrap();
        assert_eq!(found.metadata().uuid(), created.metadata().uuid());
    }

    #[test]
    fn typed_payload_columns_follow_the_metadata_columns_and_hours_partition_by_hour() {
        let payload = ParquetSchema::new(vec![
            SchemaColumn::new("user_id", ColumnType::Int64),
            SchemaColumn::new("at", ColumnType::Timestamp),
        ])
        .unwrap();
        let schema = default_schema(Some(&payload), Instants::WithZone).unwrap();
        let user = schema.field_by_name("user_id").unwrap();
        assert_eq!((user.id, user.required), (6, false));
        assert_eq!(*user.field_type, Type::Primitive(PrimitiveType::Long));
        assert!(schema.field_by_name(DATA).is_none());
        let at = schema.field_by_name("at").unwrap();
        assert_eq!(*at.field_type, Type::Primitive(PrimitiveType::Timestamptz));
        let spec = default_partition_spec(TimeBucket::Hour).unwrap();
        assert_eq!(spec.fields()[0].transform, Transform::Hour);
        assert_eq!(spec.fields()[0].name, "approximate_arrival_timestamp_hour");
    }

    #[test]
    fn utc_instants_are_timestamps_without_a_zone_for_glue() {
        let payload =
            ParquetSchema::new(vec![SchemaColumn::new("at", ColumnType::Timestamp)]).unwrap();
        let schema = default_schema(Some(&payload), Instants::Utc).unwrap();
        for name in [APPROXIMATE_ARRIVAL_TIMESTAMP, "at"] {
            let field = schema.field_by_name(name).unwrap();
            assert_eq!(
                *field.field_type,
                Type::Primitive(PrimitiveType::Timestamp),
                "{name}"
            );
        }
    }
}
