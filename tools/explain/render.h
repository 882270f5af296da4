// How a journey is printed: a timeline for people (one line per event, then the effects,
// the follow-ups, what could not be read, and the verdict last), or one JSON object for
// machines (protobuf's JSON mapping of v1::Journey).
#ifndef EONCE_TOOLS_EXPLAIN_RENDER_H_
#define EONCE_TOOLS_EXPLAIN_RENDER_H_

#include <string>

#include "eonce/v1/journey.pb.h"

namespace eonce::explain {

std::string RenderText(const v1::Journey& journey);
std::string RenderJson(const v1::Journey& journey);

}  // namespace eonce::explain

#endif  // EONCE_TOOLS_EXPLAIN_RENDER_H_
