"""Tool-call and reasoning parsers: the interfaces, the result types, the streaming engine that
formats build on, and lookup by name in the plugin registries."""

from infercore.parsers.call_stream import PartialCall, ToolCallStream, make_tool_call_id
from infercore.parsers.lookup import get_reasoning_parser, get_tool_parser
from infercore.parsers.partial_json import Malformed, parse_partial, render
from infercore.parsers.reasoning_markers import MarkerReasoningParser
from infercore.parsers.reasoning_parser import ReasoningParser
from infercore.parsers.region_parser import RegionToolParser
from infercore.parsers.scanner import NeedMore, Scanner
from infercore.parsers.tool_parser import ToolParser
from infercore.parsers.types import (
    DeltaFunctionCall,
    DeltaMessage,
    DeltaToolCall,
    ExtractedToolCalls,
    FunctionCall,
    ToolCall,
    ToolRequest,
)

__all__ = [
    "DeltaFunctionCall",
    "DeltaMessage",
    "DeltaToolCall",
    "ExtractedToolCalls",
    "FunctionCall",
    "Malformed",
    "MarkerReasoningParser",
    "NeedMore",
    "PartialCall",
    "ReasoningParser",
    "RegionToolParser",
    "Scanner",
    "ToolCall",
    "ToolCallStream",
    "ToolParser",
    "ToolRequest",
    "get_reasoning_parser",
    "get_tool_parser",
    "make_tool_call_id",
    "parse_partial",
    "render",
]
