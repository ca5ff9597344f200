/**
 * The conformance fixture's resources, resource templates, prompts and completions, as the
 * scenario texts name them (testing/conformance/fixture-server.ts).
 */
import type { Server } from '@modelcontextprotocol/sdk/server/index.js';
import {
  CompleteRequestSchema,
  GetPromptRequestSchema,
  ListPromptsRequestSchema,
  ListResourcesRequestSchema,
  ListResourceTemplatesRequestSchema,
  ReadResourceRequestSchema,
  SubscribeRequestSchema,
  UnsubscribeRequestSchema,
} from '@modelcontextprotocol/sdk/types.js';
import { RED_PIXEL_PNG } from './fixture-tools.js';

/** Resources, templates and subscriptions, then prompts and completions. */
export function registerResourcesAndPrompts(server: Server, subscriptions: Set<string>): void {
  registerResources(server, subscriptions);
  registerPrompts(server);
}

/** Resources, resource templates and subscriptions. */
function registerResources(server: Server, subscriptions: Set<string>): void {
  server.setRequestHandler(ListResourcesRequestSchema, async () => ({
    resources: [
      {
        uri: 'test://static-text',
        name: 'Static text',
        description: 'A static text resource',
        mimeType: 'text/plain',
      },
      {
        uri: 'test://static-binary',
        name: 'Static binary',
        description: 'A static PNG',
        mimeType: 'image/png',
      },
      {
        uri: 'test://watched-resource',
        name: 'Watched',
        description: 'A resource to subscribe to',
        mimeType: 'text/plain',
      },
    ],
  }));
  server.setRequestHandler(ListResourceTemplatesRequestSchema, async () => ({
    resourceTemplates: [
      {
        uriTemplate: 'test://template/{id}/data',
        name: 'Template data',
        description: 'Data for one id',
        mimeType: 'application/json',
      },
    ],
  }));
  server.setRequestHandler(ReadResourceRequestSchema, async (req) => {
    const uri = req.params.uri;
    if (uri === 'test://static-text')
      return {
        contents: [{ uri, mimeType: 'text/plain', text: 'This is the content of the static text resource.' }],
      };
    if (uri === 'test://static-binary')
      return { contents: [{ uri, mimeType: 'image/png', blob: RED_PIXEL_PNG }] };
    if (uri === 'test://watched-resource')
      return { contents: [{ uri, mimeType: 'text/plain', text: 'watched' }] };
    const m = /^test:\/\/template\/([^/]+)\/data$/.exec(uri);
    if (m) {
      const id = decodeURIComponent(m[1] as string);
      return {
        contents: [
          {
            uri,
            mimeType: 'application/json',
            text: JSON.stringify({ id, templateTest: true, data: `Data for ID: ${id}` }),
          },
        ],
      };
    }
    throw Object.assign(new Error(`resource not found: ${uri}`), { code: -32002 });
  });
  server.setRequestHandler(SubscribeRequestSchema, async (req) => {
    subscriptions.add(req.params.uri);
    return {};
  });
  server.setRequestHandler(UnsubscribeRequestSchema, async (req) => {
    subscriptions.delete(req.params.uri);
    return {};
  });
}

/** Prompts and completions. */
function registerPrompts(server: Server): void {
  server.setRequestHandler(ListPromptsRequestSchema, async () => ({
    prompts: [
      { name: 'test_simple_prompt', description: 'A simple prompt' },
      {
        name: 'test_prompt_with_arguments',
        description: 'A prompt with two arguments',
        arguments: [
          { name: 'arg1', description: 'First test argument', required: true },
          { name: 'arg2', description: 'Second test argument', required: true },
        ],
      },
      {
        name: 'test_prompt_with_embedded_resource',
        description: 'A prompt embedding a resource',
        arguments: [{ name: 'resourceUri', description: 'URI of the resource to embed', required: true }],
      },
      { name: 'test_prompt_with_image', description: 'A prompt with an image' },
    ],
  }));
  server.setRequestHandler(GetPromptRequestSchema, async (req) => {
    const a = req.params.arguments ?? {};
    switch (req.params.name) {
      case 'test_simple_prompt':
        return {
          messages: [
            { role: 'user', content: { type: 'text', text: 'This is a simple prompt for testing.' } },
          ],
        };
      case 'test_prompt_with_arguments':
        return {
          messages: [
            {
              role: 'user',
              content: { type: 'text', text: `Prompt with arguments: arg1='${a.arg1}', arg2='${a.arg2}'` },
            },
          ],
        };
      case 'test_prompt_with_embedded_resource':
        return {
          messages: [
            {
              role: 'user',
              content: {
                type: 'resource',
                resource: {
                  uri: String(a.resourceUri),
                  mimeType: 'text/plain',
                  text: 'Embedded resource content for testing.',
                },
              },
            },
            { role: 'user', content: { type: 'text', text: 'Please process the embedded resource above.' } },
          ],
        };
      case 'test_prompt_with_image':
        return {
          messages: [
            { role: 'user', content: { type: 'image', data: RED_PIXEL_PNG, mimeType: 'image/png' } },
            { role: 'user', content: { type: 'text', text: 'Please analyze the image above.' } },
          ],
        };
      default:
        throw Object.assign(new Error(`unknown prompt ${req.params.name}`), { code: -32602 });
    }
  });
  server.setRequestHandler(CompleteRequestSchema, async (req) => {
    const value = req.params.argument.value;
    const values = ['paris', 'park', 'party'].filter((v) => v.startsWith(value));
    return { completion: { values, total: values.length, hasMore: false } };
  });
}
