from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PrimitiveType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PRIMITIVE_TYPE_INVALID: _ClassVar[PrimitiveType]
    PRED: _ClassVar[PrimitiveType]
    S8: _ClassVar[PrimitiveType]
    S16: _ClassVar[PrimitiveType]
    S32: _ClassVar[PrimitiveType]
    S64: _ClassVar[PrimitiveType]
    U8: _ClassVar[PrimitiveType]
    U16: _ClassVar[PrimitiveType]
    U32: _ClassVar[PrimitiveType]
    U64: _ClassVar[PrimitiveType]
    F16: _ClassVar[PrimitiveType]
    F32: _ClassVar[PrimitiveType]
    F64: _ClassVar[PrimitiveType]
    TUPLE: _ClassVar[PrimitiveType]
    OPAQUE_TYPE: _ClassVar[PrimitiveType]
    C64: _ClassVar[PrimitiveType]
    BF16: _ClassVar[PrimitiveType]
    TOKEN: _ClassVar[PrimitiveType]
    C128: _ClassVar[PrimitiveType]
    F8E5M2: _ClassVar[PrimitiveType]
    F8E4M3FN: _ClassVar[PrimitiveType]
    S4: _ClassVar[PrimitiveType]
    U4: _ClassVar[PrimitiveType]
    F8E4M3B11FNUZ: _ClassVar[PrimitiveType]
    F8E5M2FNUZ: _ClassVar[PrimitiveType]
    F8E4M3FNUZ: _ClassVar[PrimitiveType]
    S2: _ClassVar[PrimitiveType]
    U2: _ClassVar[PrimitiveType]
    F8E4M3: _ClassVar[PrimitiveType]
    F8E3M4: _ClassVar[PrimitiveType]
    S1: _ClassVar[PrimitiveType]
    U1: _ClassVar[PrimitiveType]
    F4E2M1FN: _ClassVar[PrimitiveType]
    F8E8M0FNU: _ClassVar[PrimitiveType]
    BUFFER: _ClassVar[PrimitiveType]
PRIMITIVE_TYPE_INVALID: PrimitiveType
PRED: PrimitiveType
S8: PrimitiveType
S16: PrimitiveType
S32: PrimitiveType
S64: PrimitiveType
U8: PrimitiveType
U16: PrimitiveType
U32: PrimitiveType
U64: PrimitiveType
F16: PrimitiveType
F32: PrimitiveType
F64: PrimitiveType
TUPLE: PrimitiveType
OPAQUE_TYPE: PrimitiveType
C64: PrimitiveType
BF16: PrimitiveType
TOKEN: PrimitiveType
C128: PrimitiveType
F8E5M2: PrimitiveType
F8E4M3FN: PrimitiveType
S4: PrimitiveType
U4: PrimitiveType
F8E4M3B11FNUZ: PrimitiveType
F8E5M2FNUZ: PrimitiveType
F8E4M3FNUZ: PrimitiveType
S2: PrimitiveType
U2: PrimitiveType
F8E4M3: PrimitiveType
F8E3M4: PrimitiveType
S1: PrimitiveType
U1: PrimitiveType
F4E2M1FN: PrimitiveType
F8E8M0FNU: PrimitiveType
BUFFER: PrimitiveType

class HloProto(_message.Message):
    __slots__ = ("hlo_module", "buffer_assignment")
    HLO_MODULE_FIELD_NUMBER: _ClassVar[int]
    BUFFER_ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    hlo_module: HloModuleProto
    buffer_assignment: BufferAssignmentProto
    def __init__(self, hlo_module: _Optional[_Union[HloModuleProto, _Mapping]] = ..., buffer_assignment: _Optional[_Union[BufferAssignmentProto, _Mapping]] = ...) -> None: ...

class HloModuleProto(_message.Message):
    __slots__ = ("name", "entry_computation_name", "computations", "id", "entry_computation_id", "input_output_alias", "device_assignment", "stack_frame_index")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ENTRY_COMPUTATION_NAME_FIELD_NUMBER: _ClassVar[int]
    COMPUTATIONS_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    ENTRY_COMPUTATION_ID_FIELD_NUMBER: _ClassVar[int]
    INPUT_OUTPUT_ALIAS_FIELD_NUMBER: _ClassVar[int]
    DEVICE_ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    STACK_FRAME_INDEX_FIELD_NUMBER: _ClassVar[int]
    name: str
    entry_computation_name: str
    computations: _containers.RepeatedCompositeFieldContainer[HloComputationProto]
    id: int
    entry_computation_id: int
    input_output_alias: HloInputOutputAliasProto
    device_assignment: DeviceAssignmentProto
    stack_frame_index: StackFrameIndexProto
    def __init__(self, name: _Optional[str] = ..., entry_computation_name: _Optional[str] = ..., computations: _Optional[_Iterable[_Union[HloComputationProto, _Mapping]]] = ..., id: _Optional[int] = ..., entry_computation_id: _Optional[int] = ..., input_output_alias: _Optional[_Union[HloInputOutputAliasProto, _Mapping]] = ..., device_assignment: _Optional[_Union[DeviceAssignmentProto, _Mapping]] = ..., stack_frame_index: _Optional[_Union[StackFrameIndexProto, _Mapping]] = ...) -> None: ...

class HloInputOutputAliasProto(_message.Message):
    __slots__ = ("entries",)
    class AliasEntryProto(_message.Message):
        __slots__ = ("output_shape_index", "parameter_number", "parameter_shape_index", "kind")
        OUTPUT_SHAPE_INDEX_FIELD_NUMBER: _ClassVar[int]
        PARAMETER_NUMBER_FIELD_NUMBER: _ClassVar[int]
        PARAMETER_SHAPE_INDEX_FIELD_NUMBER: _ClassVar[int]
        KIND_FIELD_NUMBER: _ClassVar[int]
        output_shape_index: _containers.RepeatedScalarFieldContainer[int]
        parameter_number: int
        parameter_shape_index: _containers.RepeatedScalarFieldContainer[int]
        kind: int
        def __init__(self, output_shape_index: _Optional[_Iterable[int]] = ..., parameter_number: _Optional[int] = ..., parameter_shape_index: _Optional[_Iterable[int]] = ..., kind: _Optional[int] = ...) -> None: ...
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[HloInputOutputAliasProto.AliasEntryProto]
    def __init__(self, entries: _Optional[_Iterable[_Union[HloInputOutputAliasProto.AliasEntryProto, _Mapping]]] = ...) -> None: ...

class LogicalBufferProto(_message.Message):
    __slots__ = ("id", "size", "defined_at", "color")
    class Location(_message.Message):
        __slots__ = ("instruction_name", "shape_index", "instruction_id")
        INSTRUCTION_NAME_FIELD_NUMBER: _ClassVar[int]
        SHAPE_INDEX_FIELD_NUMBER: _ClassVar[int]
        INSTRUCTION_ID_FIELD_NUMBER: _ClassVar[int]
        instruction_name: str
        shape_index: _containers.RepeatedScalarFieldContainer[int]
        instruction_id: int
        def __init__(self, instruction_name: _Optional[str] = ..., shape_index: _Optional[_Iterable[int]] = ..., instruction_id: _Optional[int] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    DEFINED_AT_FIELD_NUMBER: _ClassVar[int]
    COLOR_FIELD_NUMBER: _ClassVar[int]
    id: int
    size: int
    defined_at: LogicalBufferProto.Location
    color: int
    def __init__(self, id: _Optional[int] = ..., size: _Optional[int] = ..., defined_at: _Optional[_Union[LogicalBufferProto.Location, _Mapping]] = ..., color: _Optional[int] = ...) -> None: ...

class BufferAllocationProto(_message.Message):
    __slots__ = ("index", "size", "is_thread_local", "is_entry_computation_parameter", "parameter_number", "maybe_live_out", "color", "assigned", "parameter_shape_index", "is_tuple", "is_constant")
    class Assigned(_message.Message):
        __slots__ = ("logical_buffer_id", "offset", "size")
        LOGICAL_BUFFER_ID_FIELD_NUMBER: _ClassVar[int]
        OFFSET_FIELD_NUMBER: _ClassVar[int]
        SIZE_FIELD_NUMBER: _ClassVar[int]
        logical_buffer_id: int
        offset: int
        size: int
        def __init__(self, logical_buffer_id: _Optional[int] = ..., offset: _Optional[int] = ..., size: _Optional[int] = ...) -> None: ...
    INDEX_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    IS_THREAD_LOCAL_FIELD_NUMBER: _ClassVar[int]
    IS_ENTRY_COMPUTATION_PARAMETER_FIELD_NUMBER: _ClassVar[int]
    PARAMETER_NUMBER_FIELD_NUMBER: _ClassVar[int]
    MAYBE_LIVE_OUT_FIELD_NUMBER: _ClassVar[int]
    COLOR_FIELD_NUMBER: _ClassVar[int]
    ASSIGNED_FIELD_NUMBER: _ClassVar[int]
    PARAMETER_SHAPE_INDEX_FIELD_NUMBER: _ClassVar[int]
    IS_TUPLE_FIELD_NUMBER: _ClassVar[int]
    IS_CONSTANT_FIELD_NUMBER: _ClassVar[int]
    index: int
    size: int
    is_thread_local: bool
    is_entry_computation_parameter: bool
    parameter_number: int
    maybe_live_out: bool
    color: int
    assigned: _containers.RepeatedCompositeFieldContainer[BufferAllocationProto.Assigned]
    parameter_shape_index: _containers.RepeatedScalarFieldContainer[int]
    is_tuple: bool
    is_constant: bool
    def __init__(self, index: _Optional[int] = ..., size: _Optional[int] = ..., is_thread_local: _Optional[bool] = ..., is_entry_computation_parameter: _Optional[bool] = ..., parameter_number: _Optional[int] = ..., maybe_live_out: _Optional[bool] = ..., color: _Optional[int] = ..., assigned: _Optional[_Iterable[_Union[BufferAllocationProto.Assigned, _Mapping]]] = ..., parameter_shape_index: _Optional[_Iterable[int]] = ..., is_tuple: _Optional[bool] = ..., is_constant: _Optional[bool] = ...) -> None: ...

class HeapSimulatorTrace(_message.Message):
    __slots__ = ("events", "whole_module_simulation", "buffer_allocation_index")
    class Event(_message.Message):
        __slots__ = ("kind", "buffer_id", "computation_name", "instruction_name", "share_with_canonical_id")
        KIND_FIELD_NUMBER: _ClassVar[int]
        BUFFER_ID_FIELD_NUMBER: _ClassVar[int]
        COMPUTATION_NAME_FIELD_NUMBER: _ClassVar[int]
        INSTRUCTION_NAME_FIELD_NUMBER: _ClassVar[int]
        SHARE_WITH_CANONICAL_ID_FIELD_NUMBER: _ClassVar[int]
        kind: int
        buffer_id: int
        computation_name: str
        instruction_name: str
        share_with_canonical_id: int
        def __init__(self, kind: _Optional[int] = ..., buffer_id: _Optional[int] = ..., computation_name: _Optional[str] = ..., instruction_name: _Optional[str] = ..., share_with_canonical_id: _Optional[int] = ...) -> None: ...
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    WHOLE_MODULE_SIMULATION_FIELD_NUMBER: _ClassVar[int]
    BUFFER_ALLOCATION_INDEX_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[HeapSimulatorTrace.Event]
    whole_module_simulation: bool
    buffer_allocation_index: int
    def __init__(self, events: _Optional[_Iterable[_Union[HeapSimulatorTrace.Event, _Mapping]]] = ..., whole_module_simulation: _Optional[bool] = ..., buffer_allocation_index: _Optional[int] = ...) -> None: ...

class BufferAssignmentProto(_message.Message):
    __slots__ = ("logical_buffers", "buffer_aliases", "buffer_allocations", "heap_simulator_traces")
    class BufferAlias(_message.Message):
        __slots__ = ("source_buffer_id", "location")
        SOURCE_BUFFER_ID_FIELD_NUMBER: _ClassVar[int]
        LOCATION_FIELD_NUMBER: _ClassVar[int]
        source_buffer_id: int
        location: LogicalBufferProto.Location
        def __init__(self, source_buffer_id: _Optional[int] = ..., location: _Optional[_Union[LogicalBufferProto.Location, _Mapping]] = ...) -> None: ...
    LOGICAL_BUFFERS_FIELD_NUMBER: _ClassVar[int]
    BUFFER_ALIASES_FIELD_NUMBER: _ClassVar[int]
    BUFFER_ALLOCATIONS_FIELD_NUMBER: _ClassVar[int]
    HEAP_SIMULATOR_TRACES_FIELD_NUMBER: _ClassVar[int]
    logical_buffers: _containers.RepeatedCompositeFieldContainer[LogicalBufferProto]
    buffer_aliases: _containers.RepeatedCompositeFieldContainer[BufferAssignmentProto.BufferAlias]
    buffer_allocations: _containers.RepeatedCompositeFieldContainer[BufferAllocationProto]
    heap_simulator_traces: _containers.RepeatedCompositeFieldContainer[HeapSimulatorTrace]
    def __init__(self, logical_buffers: _Optional[_Iterable[_Union[LogicalBufferProto, _Mapping]]] = ..., buffer_aliases: _Optional[_Iterable[_Union[BufferAssignmentProto.BufferAlias, _Mapping]]] = ..., buffer_allocations: _Optional[_Iterable[_Union[BufferAllocationProto, _Mapping]]] = ..., heap_simulator_traces: _Optional[_Iterable[_Union[HeapSimulatorTrace, _Mapping]]] = ...) -> None: ...

class DeviceAssignmentProto(_message.Message):
    __slots__ = ("replica_count", "computation_count", "computation_devices")
    class ComputationDevice(_message.Message):
        __slots__ = ("replica_device_ids",)
        REPLICA_DEVICE_IDS_FIELD_NUMBER: _ClassVar[int]
        replica_device_ids: _containers.RepeatedScalarFieldContainer[int]
        def __init__(self, replica_device_ids: _Optional[_Iterable[int]] = ...) -> None: ...
    REPLICA_COUNT_FIELD_NUMBER: _ClassVar[int]
    COMPUTATION_COUNT_FIELD_NUMBER: _ClassVar[int]
    COMPUTATION_DEVICES_FIELD_NUMBER: _ClassVar[int]
    replica_count: int
    computation_count: int
    computation_devices: _containers.RepeatedCompositeFieldContainer[DeviceAssignmentProto.ComputationDevice]
    def __init__(self, replica_count: _Optional[int] = ..., computation_count: _Optional[int] = ..., computation_devices: _Optional[_Iterable[_Union[DeviceAssignmentProto.ComputationDevice, _Mapping]]] = ...) -> None: ...

class HloComputationProto(_message.Message):
    __slots__ = ("name", "instructions", "id", "root_id", "is_fusion_computation", "execution_thread")
    NAME_FIELD_NUMBER: _ClassVar[int]
    INSTRUCTIONS_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    ROOT_ID_FIELD_NUMBER: _ClassVar[int]
    IS_FUSION_COMPUTATION_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_THREAD_FIELD_NUMBER: _ClassVar[int]
    name: str
    instructions: _containers.RepeatedCompositeFieldContainer[HloInstructionProto]
    id: int
    root_id: int
    is_fusion_computation: bool
    execution_thread: str
    def __init__(self, name: _Optional[str] = ..., instructions: _Optional[_Iterable[_Union[HloInstructionProto, _Mapping]]] = ..., id: _Optional[int] = ..., root_id: _Optional[int] = ..., is_fusion_computation: _Optional[bool] = ..., execution_thread: _Optional[str] = ...) -> None: ...

class StackFrameIndexProto(_message.Message):
    __slots__ = ("file_names", "function_names", "file_locations", "stack_frames")
    class FileLocation(_message.Message):
        __slots__ = ("file_name_id", "function_name_id", "line", "column")
        FILE_NAME_ID_FIELD_NUMBER: _ClassVar[int]
        FUNCTION_NAME_ID_FIELD_NUMBER: _ClassVar[int]
        LINE_FIELD_NUMBER: _ClassVar[int]
        COLUMN_FIELD_NUMBER: _ClassVar[int]
        file_name_id: int
        function_name_id: int
        line: int
        column: int
        def __init__(self, file_name_id: _Optional[int] = ..., function_name_id: _Optional[int] = ..., line: _Optional[int] = ..., column: _Optional[int] = ...) -> None: ...
    class StackFrame(_message.Message):
        __slots__ = ("file_location_id", "parent_frame_id")
        FILE_LOCATION_ID_FIELD_NUMBER: _ClassVar[int]
        PARENT_FRAME_ID_FIELD_NUMBER: _ClassVar[int]
        file_location_id: int
        parent_frame_id: int
        def __init__(self, file_location_id: _Optional[int] = ..., parent_frame_id: _Optional[int] = ...) -> None: ...
    FILE_NAMES_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_NAMES_FIELD_NUMBER: _ClassVar[int]
    FILE_LOCATIONS_FIELD_NUMBER: _ClassVar[int]
    STACK_FRAMES_FIELD_NUMBER: _ClassVar[int]
    file_names: _containers.RepeatedScalarFieldContainer[str]
    function_names: _containers.RepeatedScalarFieldContainer[str]
    file_locations: _containers.RepeatedCompositeFieldContainer[StackFrameIndexProto.FileLocation]
    stack_frames: _containers.RepeatedCompositeFieldContainer[StackFrameIndexProto.StackFrame]
    def __init__(self, file_names: _Optional[_Iterable[str]] = ..., function_names: _Optional[_Iterable[str]] = ..., file_locations: _Optional[_Iterable[_Union[StackFrameIndexProto.FileLocation, _Mapping]]] = ..., stack_frames: _Optional[_Iterable[_Union[StackFrameIndexProto.StackFrame, _Mapping]]] = ...) -> None: ...

class HloInstructionProto(_message.Message):
    __slots__ = ("name", "opcode", "shape", "metadata", "literal", "parameter_number", "fusion_kind", "tuple_index", "dimensions", "window", "convolution_dimension_numbers", "slice_dimensions", "dynamic_slice_sizes", "padding_config", "channel_id", "custom_call_target", "dot_dimension_numbers", "fft_type", "fft_length", "gather_dimension_numbers", "gather_slice_sizes", "id", "operand_ids", "called_computation_ids", "backend_config", "is_host_transfer", "scatter_dimension_numbers", "replica_groups", "feature_group_count", "precision_config", "source_target_pairs", "operand_shapes_with_layout", "batch_group_count", "comparison_direction", "frontend_attributes", "use_global_device_ids", "async_execution_thread", "k", "collective_device_list", "ragged_dot_dimension_numbers")
    class SliceDimensions(_message.Message):
        __slots__ = ("start", "limit", "stride")
        START_FIELD_NUMBER: _ClassVar[int]
        LIMIT_FIELD_NUMBER: _ClassVar[int]
        STRIDE_FIELD_NUMBER: _ClassVar[int]
        start: int
        limit: int
        stride: int
        def __init__(self, start: _Optional[int] = ..., limit: _Optional[int] = ..., stride: _Optional[int] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    OPCODE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    LITERAL_FIELD_NUMBER: _ClassVar[int]
    PARAMETER_NUMBER_FIELD_NUMBER: _ClassVar[int]
    FUSION_KIND_FIELD_NUMBER: _ClassVar[int]
    TUPLE_INDEX_FIELD_NUMBER: _ClassVar[int]
    DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    CONVOLUTION_DIMENSION_NUMBERS_FIELD_NUMBER: _ClassVar[int]
    SLICE_DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    DYNAMIC_SLICE_SIZES_FIELD_NUMBER: _ClassVar[int]
    PADDING_CONFIG_FIELD_NUMBER: _ClassVar[int]
    CHANNEL_ID_FIELD_NUMBER: _ClassVar[int]
    CUSTOM_CALL_TARGET_FIELD_NUMBER: _ClassVar[int]
    DOT_DIMENSION_NUMBERS_FIELD_NUMBER: _ClassVar[int]
    FFT_TYPE_FIELD_NUMBER: _ClassVar[int]
    FFT_LENGTH_FIELD_NUMBER: _ClassVar[int]
    GATHER_DIMENSION_NUMBERS_FIELD_NUMBER: _ClassVar[int]
    GATHER_SLICE_SIZES_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    OPERAND_IDS_FIELD_NUMBER: _ClassVar[int]
    CALLED_COMPUTATION_IDS_FIELD_NUMBER: _ClassVar[int]
    BACKEND_CONFIG_FIELD_NUMBER: _ClassVar[int]
    IS_HOST_TRANSFER_FIELD_NUMBER: _ClassVar[int]
    SCATTER_DIMENSION_NUMBERS_FIELD_NUMBER: _ClassVar[int]
    REPLICA_GROUPS_FIELD_NUMBER: _ClassVar[int]
    FEATURE_GROUP_COUNT_FIELD_NUMBER: _ClassVar[int]
    PRECISION_CONFIG_FIELD_NUMBER: _ClassVar[int]
    SOURCE_TARGET_PAIRS_FIELD_NUMBER: _ClassVar[int]
    OPERAND_SHAPES_WITH_LAYOUT_FIELD_NUMBER: _ClassVar[int]
    BATCH_GROUP_COUNT_FIELD_NUMBER: _ClassVar[int]
    COMPARISON_DIRECTION_FIELD_NUMBER: _ClassVar[int]
    FRONTEND_ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    USE_GLOBAL_DEVICE_IDS_FIELD_NUMBER: _ClassVar[int]
    ASYNC_EXECUTION_THREAD_FIELD_NUMBER: _ClassVar[int]
    K_FIELD_NUMBER: _ClassVar[int]
    COLLECTIVE_DEVICE_LIST_FIELD_NUMBER: _ClassVar[int]
    RAGGED_DOT_DIMENSION_NUMBERS_FIELD_NUMBER: _ClassVar[int]
    name: str
    opcode: str
    shape: ShapeProto
    metadata: OpMetadata
    literal: LiteralProto
    parameter_number: int
    fusion_kind: str
    tuple_index: int
    dimensions: _containers.RepeatedScalarFieldContainer[int]
    window: Window
    convolution_dimension_numbers: ConvolutionDimensionNumbers
    slice_dimensions: _containers.RepeatedCompositeFieldContainer[HloInstructionProto.SliceDimensions]
    dynamic_slice_sizes: _containers.RepeatedScalarFieldContainer[int]
    padding_config: PaddingConfig
    channel_id: int
    custom_call_target: str
    dot_dimension_numbers: DotDimensionNumbers
    fft_type: int
    fft_length: _containers.RepeatedScalarFieldContainer[int]
    gather_dimension_numbers: GatherDimensionNumbers
    gather_slice_sizes: _containers.RepeatedScalarFieldContainer[int]
    id: int
    operand_ids: _containers.RepeatedScalarFieldContainer[int]
    called_computation_ids: _containers.RepeatedScalarFieldContainer[int]
    backend_config: bytes
    is_host_transfer: bool
    scatter_dimension_numbers: ScatterDimensionNumbers
    replica_groups: _containers.RepeatedCompositeFieldContainer[ReplicaGroup]
    feature_group_count: int
    precision_config: PrecisionConfig
    source_target_pairs: _containers.RepeatedCompositeFieldContainer[SourceTarget]
    operand_shapes_with_layout: _containers.RepeatedCompositeFieldContainer[ShapeProto]
    batch_group_count: int
    comparison_direction: str
    frontend_attributes: FrontendAttributes
    use_global_device_ids: bool
    async_execution_thread: str
    k: int
    collective_device_list: CollectiveDeviceListProto
    ragged_dot_dimension_numbers: RaggedDotDimensionNumbers
    def __init__(self, name: _Optional[str] = ..., opcode: _Optional[str] = ..., shape: _Optional[_Union[ShapeProto, _Mapping]] = ..., metadata: _Optional[_Union[OpMetadata, _Mapping]] = ..., literal: _Optional[_Union[LiteralProto, _Mapping]] = ..., parameter_number: _Optional[int] = ..., fusion_kind: _Optional[str] = ..., tuple_index: _Optional[int] = ..., dimensions: _Optional[_Iterable[int]] = ..., window: _Optional[_Union[Window, _Mapping]] = ..., convolution_dimension_numbers: _Optional[_Union[ConvolutionDimensionNumbers, _Mapping]] = ..., slice_dimensions: _Optional[_Iterable[_Union[HloInstructionProto.SliceDimensions, _Mapping]]] = ..., dynamic_slice_sizes: _Optional[_Iterable[int]] = ..., padding_config: _Optional[_Union[PaddingConfig, _Mapping]] = ..., channel_id: _Optional[int] = ..., custom_call_target: _Optional[str] = ..., dot_dimension_numbers: _Optional[_Union[DotDimensionNumbers, _Mapping]] = ..., fft_type: _Optional[int] = ..., fft_length: _Optional[_Iterable[int]] = ..., gather_dimension_numbers: _Optional[_Union[GatherDimensionNumbers, _Mapping]] = ..., gather_slice_sizes: _Optional[_Iterable[int]] = ..., id: _Optional[int] = ..., operand_ids: _Optional[_Iterable[int]] = ..., called_computation_ids: _Optional[_Iterable[int]] = ..., backend_config: _Optional[bytes] = ..., is_host_transfer: _Optional[bool] = ..., scatter_dimension_numbers: _Optional[_Union[ScatterDimensionNumbers, _Mapping]] = ..., replica_groups: _Optional[_Iterable[_Union[ReplicaGroup, _Mapping]]] = ..., feature_group_count: _Optional[int] = ..., precision_config: _Optional[_Union[PrecisionConfig, _Mapping]] = ..., source_target_pairs: _Optional[_Iterable[_Union[SourceTarget, _Mapping]]] = ..., operand_shapes_with_layout: _Optional[_Iterable[_Union[ShapeProto, _Mapping]]] = ..., batch_group_count: _Optional[int] = ..., comparison_direction: _Optional[str] = ..., frontend_attributes: _Optional[_Union[FrontendAttributes, _Mapping]] = ..., use_global_device_ids: _Optional[bool] = ..., async_execution_thread: _Optional[str] = ..., k: _Optional[int] = ..., collective_device_list: _Optional[_Union[CollectiveDeviceListProto, _Mapping]] = ..., ragged_dot_dimension_numbers: _Optional[_Union[RaggedDotDimensionNumbers, _Mapping]] = ...) -> None: ...

class LiteralProto(_message.Message):
    __slots__ = ("shape", "s32s", "s64s", "u32s", "u64s")
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    S32S_FIELD_NUMBER: _ClassVar[int]
    S64S_FIELD_NUMBER: _ClassVar[int]
    U32S_FIELD_NUMBER: _ClassVar[int]
    U64S_FIELD_NUMBER: _ClassVar[int]
    shape: ShapeProto
    s32s: _containers.RepeatedScalarFieldContainer[int]
    s64s: _containers.RepeatedScalarFieldContainer[int]
    u32s: _containers.RepeatedScalarFieldContainer[int]
    u64s: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, shape: _Optional[_Union[ShapeProto, _Mapping]] = ..., s32s: _Optional[_Iterable[int]] = ..., s64s: _Optional[_Iterable[int]] = ..., u32s: _Optional[_Iterable[int]] = ..., u64s: _Optional[_Iterable[int]] = ...) -> None: ...

class LayoutProto(_message.Message):
    __slots__ = ("minor_to_major", "element_size_in_bits", "memory_space")
    MINOR_TO_MAJOR_FIELD_NUMBER: _ClassVar[int]
    ELEMENT_SIZE_IN_BITS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_SPACE_FIELD_NUMBER: _ClassVar[int]
    minor_to_major: _containers.RepeatedScalarFieldContainer[int]
    element_size_in_bits: int
    memory_space: int
    def __init__(self, minor_to_major: _Optional[_Iterable[int]] = ..., element_size_in_bits: _Optional[int] = ..., memory_space: _Optional[int] = ...) -> None: ...

class ShapeProto(_message.Message):
    __slots__ = ("element_type", "dimensions", "tuple_shapes", "layout", "is_dynamic_dimension")
    ELEMENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    TUPLE_SHAPES_FIELD_NUMBER: _ClassVar[int]
    LAYOUT_FIELD_NUMBER: _ClassVar[int]
    IS_DYNAMIC_DIMENSION_FIELD_NUMBER: _ClassVar[int]
    element_type: PrimitiveType
    dimensions: _containers.RepeatedScalarFieldContainer[int]
    tuple_shapes: _containers.RepeatedCompositeFieldContainer[ShapeProto]
    layout: LayoutProto
    is_dynamic_dimension: _containers.RepeatedScalarFieldContainer[bool]
    def __init__(self, element_type: _Optional[_Union[PrimitiveType, str]] = ..., dimensions: _Optional[_Iterable[int]] = ..., tuple_shapes: _Optional[_Iterable[_Union[ShapeProto, _Mapping]]] = ..., layout: _Optional[_Union[LayoutProto, _Mapping]] = ..., is_dynamic_dimension: _Optional[_Iterable[bool]] = ...) -> None: ...

class OpMetadata(_message.Message):
    __slots__ = ("op_type", "op_name", "source_file", "source_line", "deduplicated_name", "stack_frame_id", "scheduling_name", "source_end_line", "source_column", "source_end_column")
    OP_TYPE_FIELD_NUMBER: _ClassVar[int]
    OP_NAME_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FILE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_LINE_FIELD_NUMBER: _ClassVar[int]
    DEDUPLICATED_NAME_FIELD_NUMBER: _ClassVar[int]
    STACK_FRAME_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEDULING_NAME_FIELD_NUMBER: _ClassVar[int]
    SOURCE_END_LINE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_COLUMN_FIELD_NUMBER: _ClassVar[int]
    SOURCE_END_COLUMN_FIELD_NUMBER: _ClassVar[int]
    op_type: str
    op_name: str
    source_file: str
    source_line: int
    deduplicated_name: str
    stack_frame_id: int
    scheduling_name: str
    source_end_line: int
    source_column: int
    source_end_column: int
    def __init__(self, op_type: _Optional[str] = ..., op_name: _Optional[str] = ..., source_file: _Optional[str] = ..., source_line: _Optional[int] = ..., deduplicated_name: _Optional[str] = ..., stack_frame_id: _Optional[int] = ..., scheduling_name: _Optional[str] = ..., source_end_line: _Optional[int] = ..., source_column: _Optional[int] = ..., source_end_column: _Optional[int] = ...) -> None: ...

class WindowDimension(_message.Message):
    __slots__ = ("size", "stride", "padding_low", "padding_high", "window_dilation", "base_dilation", "window_reversal")
    SIZE_FIELD_NUMBER: _ClassVar[int]
    STRIDE_FIELD_NUMBER: _ClassVar[int]
    PADDING_LOW_FIELD_NUMBER: _ClassVar[int]
    PADDING_HIGH_FIELD_NUMBER: _ClassVar[int]
    WINDOW_DILATION_FIELD_NUMBER: _ClassVar[int]
    BASE_DILATION_FIELD_NUMBER: _ClassVar[int]
    WINDOW_REVERSAL_FIELD_NUMBER: _ClassVar[int]
    size: int
    stride: int
    padding_low: int
    padding_high: int
    window_dilation: int
    base_dilation: int
    window_reversal: bool
    def __init__(self, size: _Optional[int] = ..., stride: _Optional[int] = ..., padding_low: _Optional[int] = ..., padding_high: _Optional[int] = ..., window_dilation: _Optional[int] = ..., base_dilation: _Optional[int] = ..., window_reversal: _Optional[bool] = ...) -> None: ...

class Window(_message.Message):
    __slots__ = ("dimensions",)
    DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    dimensions: _containers.RepeatedCompositeFieldContainer[WindowDimension]
    def __init__(self, dimensions: _Optional[_Iterable[_Union[WindowDimension, _Mapping]]] = ...) -> None: ...

class ConvolutionDimensionNumbers(_message.Message):
    __slots__ = ("kernel_input_feature_dimension", "kernel_output_feature_dimension", "kernel_spatial_dimensions", "input_batch_dimension", "input_feature_dimension", "output_batch_dimension", "output_feature_dimension", "input_spatial_dimensions", "output_spatial_dimensions")
    KERNEL_INPUT_FEATURE_DIMENSION_FIELD_NUMBER: _ClassVar[int]
    KERNEL_OUTPUT_FEATURE_DIMENSION_FIELD_NUMBER: _ClassVar[int]
    KERNEL_SPATIAL_DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    INPUT_BATCH_DIMENSION_FIELD_NUMBER: _ClassVar[int]
    INPUT_FEATURE_DIMENSION_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_BATCH_DIMENSION_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FEATURE_DIMENSION_FIELD_NUMBER: _ClassVar[int]
    INPUT_SPATIAL_DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_SPATIAL_DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    kernel_input_feature_dimension: int
    kernel_output_feature_dimension: int
    kernel_spatial_dimensions: _containers.RepeatedScalarFieldContainer[int]
    input_batch_dimension: int
    input_feature_dimension: int
    output_batch_dimension: int
    output_feature_dimension: int
    input_spatial_dimensions: _containers.RepeatedScalarFieldContainer[int]
    output_spatial_dimensions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, kernel_input_feature_dimension: _Optional[int] = ..., kernel_output_feature_dimension: _Optional[int] = ..., kernel_spatial_dimensions: _Optional[_Iterable[int]] = ..., input_batch_dimension: _Optional[int] = ..., input_feature_dimension: _Optional[int] = ..., output_batch_dimension: _Optional[int] = ..., output_feature_dimension: _Optional[int] = ..., input_spatial_dimensions: _Optional[_Iterable[int]] = ..., output_spatial_dimensions: _Optional[_Iterable[int]] = ...) -> None: ...

class DotDimensionNumbers(_message.Message):
    __slots__ = ("lhs_contracting_dimensions", "rhs_contracting_dimensions", "lhs_batch_dimensions", "rhs_batch_dimensions")
    LHS_CONTRACTING_DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    RHS_CONTRACTING_DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    LHS_BATCH_DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    RHS_BATCH_DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    lhs_contracting_dimensions: _containers.RepeatedScalarFieldContainer[int]
    rhs_contracting_dimensions: _containers.RepeatedScalarFieldContainer[int]
    lhs_batch_dimensions: _containers.RepeatedScalarFieldContainer[int]
    rhs_batch_dimensions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, lhs_contracting_dimensions: _Optional[_Iterable[int]] = ..., rhs_contracting_dimensions: _Optional[_Iterable[int]] = ..., lhs_batch_dimensions: _Optional[_Iterable[int]] = ..., rhs_batch_dimensions: _Optional[_Iterable[int]] = ...) -> None: ...

class RaggedDotDimensionNumbers(_message.Message):
    __slots__ = ("dot_dimension_numbers", "lhs_ragged_dimensions", "rhs_group_dimensions")
    DOT_DIMENSION_NUMBERS_FIELD_NUMBER: _ClassVar[int]
    LHS_RAGGED_DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    RHS_GROUP_DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    dot_dimension_numbers: DotDimensionNumbers
    lhs_ragged_dimensions: _containers.RepeatedScalarFieldContainer[int]
    rhs_group_dimensions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, dot_dimension_numbers: _Optional[_Union[DotDimensionNumbers, _Mapping]] = ..., lhs_ragged_dimensions: _Optional[_Iterable[int]] = ..., rhs_group_dimensions: _Optional[_Iterable[int]] = ...) -> None: ...

class PaddingConfig(_message.Message):
    __slots__ = ("dimensions",)
    class PaddingConfigDimension(_message.Message):
        __slots__ = ("edge_padding_low", "edge_padding_high", "interior_padding")
        EDGE_PADDING_LOW_FIELD_NUMBER: _ClassVar[int]
        EDGE_PADDING_HIGH_FIELD_NUMBER: _ClassVar[int]
        INTERIOR_PADDING_FIELD_NUMBER: _ClassVar[int]
        edge_padding_low: int
        edge_padding_high: int
        interior_padding: int
        def __init__(self, edge_padding_low: _Optional[int] = ..., edge_padding_high: _Optional[int] = ..., interior_padding: _Optional[int] = ...) -> None: ...
    DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    dimensions: _containers.RepeatedCompositeFieldContainer[PaddingConfig.PaddingConfigDimension]
    def __init__(self, dimensions: _Optional[_Iterable[_Union[PaddingConfig.PaddingConfigDimension, _Mapping]]] = ...) -> None: ...

class GatherDimensionNumbers(_message.Message):
    __slots__ = ("offset_dims", "collapsed_slice_dims", "start_index_map", "index_vector_dim", "operand_batching_dims", "start_indices_batching_dims")
    OFFSET_DIMS_FIELD_NUMBER: _ClassVar[int]
    COLLAPSED_SLICE_DIMS_FIELD_NUMBER: _ClassVar[int]
    START_INDEX_MAP_FIELD_NUMBER: _ClassVar[int]
    INDEX_VECTOR_DIM_FIELD_NUMBER: _ClassVar[int]
    OPERAND_BATCHING_DIMS_FIELD_NUMBER: _ClassVar[int]
    START_INDICES_BATCHING_DIMS_FIELD_NUMBER: _ClassVar[int]
    offset_dims: _containers.RepeatedScalarFieldContainer[int]
    collapsed_slice_dims: _containers.RepeatedScalarFieldContainer[int]
    start_index_map: _containers.RepeatedScalarFieldContainer[int]
    index_vector_dim: int
    operand_batching_dims: _containers.RepeatedScalarFieldContainer[int]
    start_indices_batching_dims: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, offset_dims: _Optional[_Iterable[int]] = ..., collapsed_slice_dims: _Optional[_Iterable[int]] = ..., start_index_map: _Optional[_Iterable[int]] = ..., index_vector_dim: _Optional[int] = ..., operand_batching_dims: _Optional[_Iterable[int]] = ..., start_indices_batching_dims: _Optional[_Iterable[int]] = ...) -> None: ...

class ScatterDimensionNumbers(_message.Message):
    __slots__ = ("update_window_dims", "inserted_window_dims", "scatter_dims_to_operand_dims", "index_vector_dim", "input_batching_dims", "scatter_indices_batching_dims")
    UPDATE_WINDOW_DIMS_FIELD_NUMBER: _ClassVar[int]
    INSERTED_WINDOW_DIMS_FIELD_NUMBER: _ClassVar[int]
    SCATTER_DIMS_TO_OPERAND_DIMS_FIELD_NUMBER: _ClassVar[int]
    INDEX_VECTOR_DIM_FIELD_NUMBER: _ClassVar[int]
    INPUT_BATCHING_DIMS_FIELD_NUMBER: _ClassVar[int]
    SCATTER_INDICES_BATCHING_DIMS_FIELD_NUMBER: _ClassVar[int]
    update_window_dims: _containers.RepeatedScalarFieldContainer[int]
    inserted_window_dims: _containers.RepeatedScalarFieldContainer[int]
    scatter_dims_to_operand_dims: _containers.RepeatedScalarFieldContainer[int]
    index_vector_dim: int
    input_batching_dims: _containers.RepeatedScalarFieldContainer[int]
    scatter_indices_batching_dims: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, update_window_dims: _Optional[_Iterable[int]] = ..., inserted_window_dims: _Optional[_Iterable[int]] = ..., scatter_dims_to_operand_dims: _Optional[_Iterable[int]] = ..., index_vector_dim: _Optional[int] = ..., input_batching_dims: _Optional[_Iterable[int]] = ..., scatter_indices_batching_dims: _Optional[_Iterable[int]] = ...) -> None: ...

class PrecisionConfig(_message.Message):
    __slots__ = ("operand_precision", "algorithm")
    OPERAND_PRECISION_FIELD_NUMBER: _ClassVar[int]
    ALGORITHM_FIELD_NUMBER: _ClassVar[int]
    operand_precision: _containers.RepeatedScalarFieldContainer[int]
    algorithm: int
    def __init__(self, operand_precision: _Optional[_Iterable[int]] = ..., algorithm: _Optional[int] = ...) -> None: ...

class FrontendAttributes(_message.Message):
    __slots__ = ("map",)
    class MapEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    MAP_FIELD_NUMBER: _ClassVar[int]
    map: _containers.ScalarMap[str, str]
    def __init__(self, map: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ReplicaGroup(_message.Message):
    __slots__ = ("replica_ids",)
    REPLICA_IDS_FIELD_NUMBER: _ClassVar[int]
    replica_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, replica_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class IotaReplicaGroupListProto(_message.Message):
    __slots__ = ("num_replica_groups", "num_devices_per_group", "iota_reshape_dims", "iota_transpose_perm")
    NUM_REPLICA_GROUPS_FIELD_NUMBER: _ClassVar[int]
    NUM_DEVICES_PER_GROUP_FIELD_NUMBER: _ClassVar[int]
    IOTA_RESHAPE_DIMS_FIELD_NUMBER: _ClassVar[int]
    IOTA_TRANSPOSE_PERM_FIELD_NUMBER: _ClassVar[int]
    num_replica_groups: int
    num_devices_per_group: int
    iota_reshape_dims: _containers.RepeatedScalarFieldContainer[int]
    iota_transpose_perm: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, num_replica_groups: _Optional[int] = ..., num_devices_per_group: _Optional[int] = ..., iota_reshape_dims: _Optional[_Iterable[int]] = ..., iota_transpose_perm: _Optional[_Iterable[int]] = ...) -> None: ...

class CollectiveDeviceListProto(_message.Message):
    __slots__ = ("replica_groups", "iota_replica_group_list")
    REPLICA_GROUPS_FIELD_NUMBER: _ClassVar[int]
    IOTA_REPLICA_GROUP_LIST_FIELD_NUMBER: _ClassVar[int]
    replica_groups: _containers.RepeatedCompositeFieldContainer[ReplicaGroup]
    iota_replica_group_list: IotaReplicaGroupListProto
    def __init__(self, replica_groups: _Optional[_Iterable[_Union[ReplicaGroup, _Mapping]]] = ..., iota_replica_group_list: _Optional[_Union[IotaReplicaGroupListProto, _Mapping]] = ...) -> None: ...

class SourceTarget(_message.Message):
    __slots__ = ("source", "target")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    source: int
    target: int
    def __init__(self, source: _Optional[int] = ..., target: _Optional[int] = ...) -> None: ...
