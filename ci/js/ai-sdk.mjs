// The Vercel AI SDK (`ai` with `@ai-sdk/openai`) asking blink for an object of a zod schema, over the Responses API
// (`openai.responses(model)`, the provider's default) and chat completions (`openai.chat(model)`): `generateObject`
// and `streamObject`, and their successors `generateText` / `streamText` with `output: Output.object(...)`.
// Prints one JSON line: per API and call, the object, finishReason, usage, warnings and every request the SDK sent
// (path, JSON body, HTTP status, and the JSON answer when it is not a stream), or the error.
// usage: node ai-sdk.mjs BASE_URL MODEL PROMPT   (BASE_URL: http://HOST:PORT/v1)
import { createOpenAI } from "@ai-sdk/openai";
import { generateObject, generateText, Output, streamObject, streamText } from "ai";
import { z } from "zod";

const [baseURL, model, prompt] = process.argv.slice(2);
// the scripted model (ci/tests/helpers/scripted.py, script `weather`) writes an instance of this
const schema = z.object({
  city: z.string(),
  temperature_c: z.number().int(),
  conditions: z.enum(["sunny", "cloudy", "rain"]),
  tags: z.array(z.string()),
});

let sent = [];
async function recording(url, init) {
  const response = await fetch(url, init);
  const json = response.headers.get("content-type")?.startsWith("application/json");
  const answer = json ? await response.clone().json() : null; // a stream is read by the SDK only
  sent.push({ path: new URL(url).pathname, body: JSON.parse(init.body), status: response.status, answer });
  return response;
}
const openai = createOpenAI({ baseURL, apiKey: "unused", fetch: recording });
const models = { responses: openai(model), chat: openai.chat(model) };
const description = "The weather in a city";
const settings = { schema, schemaName: "weather", schemaDescription: description, prompt, maxRetries: 0 };

const calls = {
  async generateObject(m) {
    const r = await generateObject({ model: m, ...settings });
    return { object: r.object, finishReason: r.finishReason, usage: r.usage, warnings: r.warnings };
  },
  async streamObject(m) {
    let error = null;
    const r = streamObject({ model: m, ...settings, onError: ({ error: e }) => (error = e) });
    const partials = [];
    for await (const partial of r.partialObjectStream) partials.push(partial);
    if (error) throw error;
    const [object, finishReason, usage, warnings] = await Promise.all([r.object, r.finishReason, r.usage, r.warnings]);
    return { object, finishReason, usage, warnings, partials: partials.length };
  },
  async generateTextOutput(m) {
    const output = Output.object({ schema, name: "weather", description });
    const r = await generateText({ model: m, output, prompt, maxRetries: 0 });
    return { object: r.output, finishReason: r.finishReason, usage: r.usage, warnings: r.warnings };
  },
  async streamTextOutput(m) {
    let error = null;
    const output = Output.object({ schema, name: "weather", description });
    const r = streamText({ model: m, output, prompt, maxRetries: 0, onError: ({ error: e }) => (error = e) });
    const partials = [];
    for await (const partial of r.partialOutputStream) partials.push(partial);
    if (error) throw error;
    const [object, finishReason, usage, warnings] = await Promise.all([r.output, r.finishReason, r.usage, r.warnings]);
    return { object, finishReason, usage, warnings, partials: partials.length };
  },
};

const out = {};
for (const [api, m] of Object.entries(models)) {
  out[api] = {};
  for (const [name, call] of Object.entries(calls)) {
    sent = [];
    let got;
    try {
      got = await call(m);
    } catch (error) {
      got = { error: `${error.constructor?.name}: ${error.message ?? String(error)}`, body: error.responseBody };
    }
    out[api][name] = { ...got, sent };
  }
}
console.log(JSON.stringify(out));
process.exit(0);
