/**
 * The conformance fixture's tools (testing/conformance/fixture-server.ts): their definitions,
 * the results the scenario texts fix, and the elicitation schemas the scenarios check.
 */
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';

export const text = (t: string): CallToolResult => ({ content: [{ type: 'text', text: t }] });

/** A 1×1 red PNG. */
export const RED_PIXEL_PNG =
  'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==';
/** 8 samples of silence, 8 kHz mono 8-bit PCM WAV. */
export const SILENT_WAV = Buffer.concat([
  Buffer.from('RIFF'),
  Buffer.from([44, 0, 0, 0]),
  Buffer.from('WAVEfmt '),
  Buffer.from([16, 0, 0, 0, 1, 0, 1, 0, 0x40, 0x1f, 0, 0, 0x40, 0x1f, 0, 0, 1, 0, 8, 0]),
  Buffer.from('data'),
  Buffer.from([8, 0, 0, 0]),
  Buffer.alloc(8, 0x80),
]).toString('base64');

const noArgs = { type: 'object', properties: {} } as const;

export const TOOLS = [
  { name: 'test_simple_text', description: 'Returns simple text', inputSchema: noArgs },
  { name: 'test_image_content', description: 'Returns an image', inputSchema: noArgs },
  { name: 'test_audio_content', description: 'Returns audio', inputSchema: noArgs },
  { name: 'test_embedded_resource', description: 'Returns an embedded resource', inputSchema: noArgs },
  {
    name: 'test_multiple_content_types',
    description: 'Returns text, image and resource',
    inputSchema: noArgs,
  },
  { name: 'test_tool_with_logging', description: 'Logs three messages while it runs', inputSchema: noArgs },
  { name: 'test_error_handling', description: 'Always fails', inputSchema: noArgs },
  { name: 'test_tool_with_progress', description: 'Reports progress 0, 50, 100', inputSchema: noArgs },
  {
    name: 'test_sampling',
    description: 'Asks the client to sample an LLM',
    inputSchema: { type: 'object', properties: { prompt: { type: 'string' } }, required: ['prompt'] },
  },
  {
    name: 'test_elicitation',
    description: 'Asks the user for input',
    inputSchema: { type: 'object', properties: { message: { type: 'string' } }, required: ['message'] },
  },
  {
    name: 'test_elicitation_sep1034_defaults',
    description: 'Elicitation with defaults',
    inputSchema: noArgs,
  },
  {
    name: 'test_elicitation_sep1330_enums',
    description: 'Elicitation with every enum form',
    inputSchema: noArgs,
  },
  {
    name: 'json_schema_2020_12_tool',
    description: 'Tool with JSON Schema 2020-12 features',
    inputSchema: {
      $schema: 'https://json-schema.org/draft/2020-12/schema',
      type: 'object',
      $defs: {
        address: { type: 'object', properties: { street: { type: 'string' }, city: { type: 'string' } } },
      },
      properties: { name: { type: 'string' }, address: { $ref: '#/$defs/address' } },
      additionalProperties: false,
    },
  },
  {
    name: 'test_reconnection',
    description: 'Answers on its POST stream (SSE polling scenario)',
    inputSchema: noArgs,
  },
  {
    name: 'test_big_result',
    description: 'Returns a text of `bytes` bytes',
    inputSchema: { type: 'object', properties: { bytes: { type: 'integer' } }, required: ['bytes'] },
  },
  { name: 'test_wait_for_cancel', description: 'Runs until cancelled (up to 30 s)', inputSchema: noArgs },
  {
    name: 'test_progress_steps',
    description: 'Reports `steps` progress notifications back to back',
    inputSchema: { type: 'object', properties: { steps: { type: 'integer' } }, required: ['steps'] },
  },
];

export const ELICIT_ENUMS = {
  type: 'object',
  properties: {
    untitledSingle: { type: 'string', enum: ['option1', 'option2', 'option3'] },
    titledSingle: {
      type: 'string',
      oneOf: [
        { const: 'value1', title: 'First Option' },
        { const: 'value2', title: 'Second Option' },
        { const: 'value3', title: 'Third Option' },
      ],
    },
    legacyEnum: {
      type: 'string',
      enum: ['opt1', 'opt2', 'opt3'],
      enumNames: ['Option One', 'Option Two', 'Option Three'],
    },
    untitledMulti: { type: 'array', items: { type: 'string', enum: ['option1', 'option2', 'option3'] } },
    titledMulti: {
      type: 'array',
      items: {
        anyOf: [
          { const: 'value1', title: 'First Choice' },
          { const: 'value2', title: 'Second Choice' },
          { const: 'value3', title: 'Third Choice' },
        ],
      },
    },
  },
};

export const ELICIT_DEFAULTS = {
  type: 'object',
  properties: {
    name: { type: 'string', default: 'John Doe' },
    age: { type: 'integer', default: 30 },
    score: { type: 'number', default: 95.5 },
    status: { type: 'string', enum: ['active', 'inactive', 'pending'], default: 'active' },
    verified: { type: 'boolean', default: true },
  },
};

/** The tools whose result is fixed by the scenario texts. */
export const STATIC_RESULTS: Record<string, CallToolResult> = {
  test_simple_text: text('This is a simple text response for testing.'),
  test_image_content: { content: [{ type: 'image', data: RED_PIXEL_PNG, mimeType: 'image/png' }] },
  test_audio_content: { content: [{ type: 'audio', data: SILENT_WAV, mimeType: 'audio/wav' }] },
  test_embedded_resource: {
    content: [
      {
        type: 'resource',
        resource: {
          uri: 'test://embedded-resource',
          mimeType: 'text/plain',
          text: 'This is an embedded resource content.',
        },
      },
    ],
  },
  test_multiple_content_types: {
    content: [
      { type: 'text', text: 'Multiple content types test:' },
      { type: 'image', data: RED_PIXEL_PNG, mimeType: 'image/png' },
      {
        type: 'resource',
        resource: {
          uri: 'test://mixed-content-resource',
          mimeType: 'application/json',
          text: JSON.stringify({ test: 'data', value: 123 }),
        },
      },
    ],
  },
  test_error_handling: {
    isError: true,
    content: [{ type: 'text', text: 'This tool intentionally returns an error for testing' }],
  },
  test_reconnection: text('reconnection test completed'),
};
