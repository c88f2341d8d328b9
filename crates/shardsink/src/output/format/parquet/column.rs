//! The Arrow builder of one column, fed the row's checked cells.

use std::sync::Arc;

use arrow_array::ArrayRef;
use arrow_array::builder::{
    BinaryBuilder, BooleanBuilder, Date32Builder, Decimal128Builder, FixedSizeBinaryBuilder,
    Float32Builder, Float64Builder, Int32Builder, Int64Builder, StringBuilder,
    TimestampMicrosecondBuilder, TimestampMillisecondBuilder,
};
use arrow_schema::{DataType, TimeUnit};

use super::row::Cell;
use super::{OFFSET_BYTES, UTC};
use crate::output::format::schema::ColumnType;

/// The builder of one column.
#[derive(Debug)]
pub(crate) enum ColumnBuilder {
    /// `string` and `json`.
    Utf8(StringBuilder),
    Boolean(BooleanBuilder),
    Int32(Int32Builder),
    Int64(Int64Builder),
    Float32(Float32Builder),
    Float64(Float64Builder),
    Timestamp(TimestampMillisecondBuilder),
    TimestampMicros(TimestampMicrosecondBuilder),
    Date(Date32Builder),
    Decimal(Decimal128Builder),
    /// Bytes with 32-bit offsets: at most 2 GiB a column.
    Binary(BinaryBuilder),
    /// Fixed-width bytes: a UUID's 16, the only width cells have.
    FixedBinary(FixedSizeBinaryBuilder),
}

impl ColumnBuilder {
    /// An empty builder of a column whose Arrow type is `data_type`, when
    /// it is one of the builders' types: Utf8, Boolean, Int32, Int64,
    /// Float32, Float64, Timestamp (milliseconds or microseconds, any
    /// zone), Date32, Decimal128, Binary, FixedSizeBinary.
    pub(crate) fn for_arrow(data_type: &DataType) -> Option<Self> {
        Some(match data_type {
            DataType::Utf8 => Self::Utf8(StringBuilder::with_capacity(0, 0)),
            DataType::Boolean => Self::Boolean(BooleanBuilder::with_capacity(0)),
            DataType::Int32 => Self::Int32(Int32Builder::with_capacity(0)),
            DataType::Int64 => Self::Int64(Int64Builder::with_capacity(0)),
            DataType::Float32 => Self::Float32(Float32Builder::with_capacity(0)),
            DataType::Float64 => Self::Float64(Float64Builder::with_capacity(0)),
            DataType::Timestamp(TimeUnit::Millisecond, zone) => Self::Timestamp(
                TimestampMillisecondBuilder::with_capacity(0).with_timezone_opt(zone.clone()),
            ),
            DataType::Timestamp(TimeUnit::Microsecond, zone) => Self::TimestampMicros(
                TimestampMicrosecondBuilder::with_capacity(0).with_timezone_opt(zone.clone()),
            ),
            DataType::Date32 => Self::Date(Date32Builder::with_capacity(0)),
            DataType::Decimal128(precision, scale) => Self::Decimal(
                Decimal128Builder::with_capacity(0)
                    .with_precision_and_scale(*precision, *scale)
                    .ok()?,
            ),
            DataType::Binary => Self::Binary(BinaryBuilder::with_capacity(0, 0)),
            DataType::FixedSizeBinary(width) => {
                Self::FixedBinary(FixedSizeBinaryBuilder::with_capacity(0, *width))
            }
            _ => return None,
        })
    }

    /// An empty builder (no capacity reserved) of a column of
    /// `column_type`.
    pub(crate) fn new(column_type: ColumnType) -> Self {
        match column_type {
            ColumnType::String | ColumnType::Json => Self::Utf8(StringBuilder::with_capacity(0, 0)),
            ColumnType::Boolean => Self::Boolean(BooleanBuilder::with_capacity(0)),
            ColumnType::Int32 => Self::Int32(Int32Builder::with_capacity(0)),
            ColumnType::Int64 => Self::Int64(Int64Builder::with_capacity(0)),
            ColumnType::Float32 => Self::Float32(Float32Builder::with_capacity(0)),
            ColumnType::Float64 => Self::Float64(Float64Builder::with_capacity(0)),
            ColumnType::Timestamp => {
                Self::Timestamp(TimestampMillisecondBuilder::with_capacity(0).with_timezone(UTC))
            }
            ColumnType::Date => Self::Date(Date32Builder::with_capacity(0)),
        }
    }

    /// Appends `cell` (made for this column's type); the bytes it adds.
    pub(crate) fn append(&mut self, cell: Cell<'_>) -> u64 {
        match (self, cell) {
            (Self::Utf8(builder), Cell::Text(text)) => {
                builder.append_value(&text);
                text.len() as u64 + OFFSET_BYTES
            }
            (Self::Boolean(builder), Cell::Bool(value)) => {
                builder.append_value(value);
                1
            }
            (Self::Int32(builder), Cell::Int32(value)) => {
                builder.append_value(value);
                4
            }
            (Self::Int64(builder), Cell::Int64(value)) => {
                builder.append_value(value);
                8
            }
            (Self::Float32(builder), Cell::Float32(value)) => {
                builder.append_value(value);
                4
            }
            (Self::Float64(builder), Cell::Float64(value)) => {
                builder.append_value(value);
                8
            }
            (Self::Timestamp(builder), Cell::TimestampMillis(value)) => {
                builder.append_value(value);
                8
            }
            (Self::TimestampMicros(builder), Cell::TimestampMicros(value)) => {
                builder.append_value(value);
                8
            }
            (Self::Date(builder), Cell::Date(days)) => {
                builder.append_value(days);
                4
            }
            (Self::Decimal(builder), Cell::Decimal(value)) => {
                builder.append_value(value);
                16
            }
            (Self::Binary(builder), Cell::Bytes(bytes)) => {
                builder.append_value(&bytes);
                bytes.len() as u64 + OFFSET_BYTES
            }
            (Self::FixedBinary(builder), Cell::Bytes(bytes)) => {
                // Cells of a fixed-width column have its width (a UUID's
                // 16 bytes); another length would be written as a null.
                let appended = builder.append_value(&bytes).is_ok();
                debug_assert!(appended, "bytes of another width");
                if !appended {
                    builder.append_null();
                }
                bytes.len() as u64
            }
            (builder, cell) => {
                // Cells are made for their column's type (`cell`), so only
                // a null gets here.
                debug_assert_eq!(cell, Cell::Null, "a cell of another column's type");
                builder.append_null()
            }
        }
    }

    /// Appends a null; the bytes it adds.
    fn append_null(&mut self) -> u64 {
        match self {
            Self::Utf8(builder) => {
                builder.append_null();
                OFFSET_BYTES
            }
            Self::Boolean(builder) => {
                builder.append_null();
                1
            }
            Self::Int32(builder) => {
                builder.append_null();
                4
            }
            Self::Int64(builder) => {
                builder.append_null();
                8
            }
            Self::Float32(builder) => {
                builder.append_null();
                4
            }
            Self::Float64(builder) => {
                builder.append_null();
                8
            }
            Self::Timestamp(builder) => {
                builder.append_null();
                8
            }
            Self::TimestampMicros(builder) => {
                builder.append_null();
                8
            }
            Self::Date(builder) => {
                builder.append_null();
                4
            }
            Self::Decimal(builder) => {
                builder.append_null();
                16
            }
            Self::Binary(builder) => {
                builder.append_null();
                OFFSET_BYTES
            }
            Self::FixedBinary(builder) => {
                builder.append_null();
                16
            }
        }
    }

    /// The column's values so far; the builder is left empty.
    pub(crate) fn finish(&mut self) -> ArrayRef {
        match self {
            Self::Utf8(builder) => Arc::new(builder.finish()),
            Self::Boolean(builder) => Arc::new(builder.finish()),
            Self::Int32(builder) => Arc::new(builder.finish()),
            Self::Int64(builder) => Arc::new(builder.finish()),
            Self::Float32(builder) => Arc::new(builder.finish()),
            Self::Float64(builder) => Arc::new(builder.finish()),
            Self::Timestamp(builder) => Arc::new(builder.finish()),
            Self::TimestampMicros(builder) => Arc::new(builder.finish()),
            Self::Date(builder) => Arc::new(builder.finish()),
            Self::Decimal(builder) => Arc::new(builder.finish()),
            Self::Binary(builder) => Arc::new(builder.finish()),
            Self::FixedBinary(builder) => Arc::new(builder.finish()),
        }
    }
}
