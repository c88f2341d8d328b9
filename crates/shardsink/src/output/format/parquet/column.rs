//! The Arrow builder of one schema column, fed the row's checked cells.

use std::sync::Arc;

use arrow_array::ArrayRef;
use arrow_array::builder::{
    BooleanBuilder, Date32Builder, Float32Builder, Float64Builder, Int32Builder, Int64Builder,
    StringBuilder, TimestampMillisecondBuilder,
};

use super::row::Cell;
use super::{OFFSET_BYTES, UTC};
use crate::output::format::schema::ColumnType;

/// The builder of one schema column.
#[derive(Debug)]
pub(super) enum ColumnBuilder {
    /// `string` and `json`.
    Utf8(StringBuilder),
    Boolean(BooleanBuilder),
    Int32(Int32Builder),
    Int64(Int64Builder),
    Float32(Float32Builder),
    Float64(Float64Builder),
    Timestamp(TimestampMillisecondBuilder),
    Date(Date32Builder),
}

impl ColumnBuilder {
    /// An empty builder (no capacity reserved) of a column of
    /// `column_type`.
    pub(super) fn new(column_type: ColumnType) -> Self {
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
    pub(super) fn append(&mut self, cell: Cell<'_>) -> u64 {
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
            (Self::Date(builder), Cell::Date(days)) => {
                builder.append_value(days);
                4
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
            Self::Date(builder) => {
                builder.append_null();
                4
            }
        }
    }

    pub(super) fn finish(&mut self) -> ArrayRef {
        match self {
            Self::Utf8(builder) => Arc::new(builder.finish()),
            Self::Boolean(builder) => Arc::new(builder.finish()),
            Self::Int32(builder) => Arc::new(builder.finish()),
            Self::Int64(builder) => Arc::new(builder.finish()),
            Self::Float32(builder) => Arc::new(builder.finish()),
            Self::Float64(builder) => Arc::new(builder.finish()),
            Self::Timestamp(builder) => Arc::new(builder.finish()),
            Self::Date(builder) => Arc::new(builder.finish()),
        }
    }
}
