// Validates an OpenAPI document (a file path, the first argument) against the OpenAPI
// specification's schema and its rules (unique operationIds, path parameters declared,
// every $ref resolving). Prints `valid: OpenAPI VERSION, N paths` or the errors; exit code 1
// when invalid.
import SwaggerParser from "@apidevtools/swagger-parser";

const file = process.argv[2];
if (!file) {
  console.error("usage: node validate.mjs OPENAPI.json");
  process.exit(2);
}
try {
  const api = await SwaggerParser.validate(file);
  console.log(`valid: OpenAPI ${api.openapi}, ${Object.keys(api.paths ?? {}).length} paths`);
} catch (err) {
  console.error(`invalid: ${err.message}`);
  process.exit(1);
}
