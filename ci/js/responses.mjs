// The openai npm SDK's `responses.create`, plain and streamed, against blink's /v1/responses; prints what it got.
// usage: node responses.mjs BASE_URL MODEL   (BASE_URL: http://HOST:PORT/v1)
import OpenAI from "openai";

const [baseURL, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: "dummy", maxRetries: 0 });
const out = {};
try {
  const plain = await client.responses.create({ model, input: "Say hello", max_output_tokens: 8 });
  out.plain = { status: plain.status, id: plain.id, output_text: plain.output_text, usage: plain.usage };
  const stream = await client.responses.create({ model, input: "Say hello", max_output_tokens: 8, stream: true });
  const types = [];
  let last = null;
  for await (const event of stream) {
    types.push(event.type);
    last = event;
  }
  out.streamed = { types, status: last?.response?.status, output_text: last?.response?.output_text ?? null };
  const helper = client.responses.stream({ model, input: "Say hello", max_output_tokens: 8 });
  let text = "";
  helper.on("response.output_text.delta", (e) => (text += e.delta));
  const final = await helper.finalResponse();
  out.helper = { status: final.status, text, output_text: final.output_text };
} catch (error) {
  out.error = `${error.constructor?.name}: ${error.message ?? String(error)}`;
}
console.log(JSON.stringify(out));
process.exit(0);
