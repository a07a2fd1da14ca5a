// @gradio/client calls the Space's `decide(state, questions, x_calibration=None)` with keyword arguments and prints
// the body it got. usage: node decide.mjs URL REQUEST_JSON [API_KEY]
// (REQUEST_JSON: {"state": ..., "questions": {...}}, and "x_calibration" only when the call passes it)
import { Client } from "@gradio/client";

const [url, request, key] = process.argv.slice(2);
const args = JSON.parse(request);
const app = await Client.connect(url, key ? { headers: { Authorization: `Bearer ${key}` } } : {});
const api = await app.view_api();
try {
  const result = await app.predict("/decide", args);
  console.log(JSON.stringify({ endpoints: Object.keys(api.named_endpoints), body: result.data[0] }));
} catch (error) {
  console.log(JSON.stringify({ endpoints: Object.keys(api.named_endpoints), error: error.message ?? String(error) }));
}
process.exit(0);
