// attnserve demo (placeholder until the kernels land in this session).
#include <cstdio>
int main() { std::printf("attnserve demo\n"); return 0; }
