{
  "targets": [
    {
      "target_name": "ringserve_shm",
      "sources": ["src/shm/native/ringserve_shm.cc"],
      "cflags_cc!": ["-std=gnu++17", "-std=gnu++20", "-std=c++17"],
      "cflags_cc": ["-std=c++20", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-cast-function-type"],
      "libraries": ["-lrt"]
    }
  ]
}
