// Validates every object of a rendered Kubernetes YAML file against the API's schemas
// (the kubernetes-models package), offline. Prints each problem; exits non-zero if any.
//
//   node validate.mjs rendered.yaml
import fs from "fs";
import yaml from "js-yaml";

async function modelFor(apiVersion, kind) {
  const [group, version] = apiVersion.includes("/") ? apiVersion.split("/") : ["", apiVersion];
  const module = group === "" ? `kubernetes-models/${version}` : `kubernetes-models/${group}/${version}`;
  try {
    return (await import(module))[kind];
  } catch (e) {
    return undefined;
  }
}

const objects = yaml.loadAll(fs.readFileSync(process.argv[2], "utf8")).filter((o) => o);
let problems = 0;
for (const o of objects) {
  const Model = await modelFor(o.apiVersion, o.kind);
  const name = `${o.kind}/${(o.metadata || {}).name}`;
  if (!Model) {
    console.log(`schema problem: ${name}: no schema for ${o.apiVersion} ${o.kind}`);
    problems++;
    continue;
  }
  try {
    new Model(o).validate();
  } catch (e) {
    console.log(`schema problem: ${name}: ${e.message}`);
    problems++;
  }
}
console.log(`${objects.length} objects validated against the Kubernetes schemas, ${problems} problems`);
process.exit(problems === 0 ? 0 : 1);
